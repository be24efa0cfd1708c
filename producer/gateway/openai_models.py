"""The import path the Batch API's line checks and views, and bench's fuzzer, still
use for the chat shapes; they live in :mod:`producer.gateway.protocol.chat`. New code
imports the protocol modules."""

from __future__ import annotations

from producer.gateway.protocol.chat import ChatCompletionRequest, completion

__all__ = ["ChatCompletionRequest", "completion"]
