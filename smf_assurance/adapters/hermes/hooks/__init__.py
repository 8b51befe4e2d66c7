"""The Hermes hook families, one module each, as mixins over the adapter's lifecycle.

- :mod:`.tool_call`: ``pre_tool_call``, the gate's verdict as a block or a go-ahead;
- :mod:`.connector_tools`: the handlers of our connector-backed tools;
- :mod:`.execution`: the ``tool_execution`` middleware (executed arguments = allowed ones);
- :mod:`.observers`: ``post_tool_call`` and ``subagent_start``, the session taint;
- :mod:`.reply`: ``transform_llm_output``, the reply the output gate released.

Every callback takes ``**kwargs`` and catches every ``Exception`` itself,
returning a block (tools) or a withheld notice (replies), never ``None`` on a
failure, because ``None`` means "go ahead" (RUNTIMES.md, "FAIL-OPEN").
"""
