"""``llmq bench``: side-by-side measurements, each printing one JSON object last."""
