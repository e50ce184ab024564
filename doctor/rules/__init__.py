"""The rules engine: rule files loaded and checked, expressions evaluated in a sandbox, findings made."""
