"""Built-in rules: the ``*.toml`` files in this folder (format: doctor/rules/loader.py)."""
