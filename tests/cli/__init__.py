"""The operator's command line as a user meets it, in process or as a subprocess,
often against a running stack."""
