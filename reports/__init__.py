"""Renderers: terminal (rich), JSON (versioned schema), Markdown (jinja2)."""
