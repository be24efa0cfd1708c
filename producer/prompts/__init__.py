"""Prompt tools: list registered prompts, lint them for waste, compress them safely.

Everything here reads prompts through :mod:`schemas.prompt_registry`; new versions are
written to the deployment's prompts folder (``LLMQ_PROMPTS_DIR``) as plain files, so
workers prefill them and producers resolve them like any other registered prompt.
"""
