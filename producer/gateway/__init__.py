"""An OpenAI-compatible HTTP gateway: any OpenAI SDK becomes an llmq client."""
