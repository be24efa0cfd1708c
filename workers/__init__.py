"""GPU-pinned Celery workers, each holding one warmed vLLM engine for its tier."""
