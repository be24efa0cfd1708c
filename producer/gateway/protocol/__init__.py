"""The OpenAI wire shapes the gateway accepts and returns: ``common`` (what both
endpoints share), ``chat`` and ``chat_messages`` (chat completions), and
``text_completions`` (legacy text completions). Pydantic models and plain functions
over ``schemas``; nothing here opens a job or knows HTTP."""
