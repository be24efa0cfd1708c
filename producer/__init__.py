"""The producer side of llmq: submit requests, stream tokens, read results.

A backend service installs only this (no torch, no vLLM)::

    from producer import Client

    client = Client.from_env()
    handle = client.submit("Where is my order?", priority="interactive")
    for chunk in handle.stream():
        print(chunk, end="")
"""

from producer.aio import AsyncClient, AsyncJobHandle
from producer.client import Client, JobHandle

__all__ = ["AsyncClient", "AsyncJobHandle", "Client", "JobHandle"]
