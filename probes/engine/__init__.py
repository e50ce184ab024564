"""Engine probes: the serving engines' configuration, pages, KV cache, load, warm-up."""
