"""The team's tools (smf_tools): candidate, claims and evidence, bypass matrix,
reviews, mutation, bench, distributions."""
