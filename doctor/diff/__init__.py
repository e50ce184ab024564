"""What changed between two states of one host: two saved scans compared (``llm-doctor diff``).

Pure comparison of two saved-scan dicts (reports/json_report.to_dict, or a saved file it
loaded): it imports no probe, renderer or command. ``compare(before, after)`` gives a
``Diff``: identity and comparability first (identity.py), then the facts (facts.py, one
extractor per family) judged against their noise floors (noise.py) and linked to the
causes they bear on (links.py), the findings raised, cleared and unchanged, and a verdict
(compare.py). docs/diff.md is the user's guide; docs/diff-schema.json the JSON's schema.
"""
