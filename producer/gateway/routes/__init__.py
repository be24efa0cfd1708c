"""The gateway's HTTP layer: each module adds one group of paths to the app, reads
what a call says (body, headers, the caller's key) and wraps what the serving layer
or the producer returns in a response. ``sse`` is the event-stream response."""
