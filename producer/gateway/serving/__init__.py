"""The gateway's serving layer: a validated request becomes a job, and the job's
stream becomes chunks or a whole answer. ``common`` holds what both endpoints share
(the model check, opening a call's job, resuming a stream), ``chat`` and
``text_completions`` one endpoint each, ``choice_stream`` the stream of a job that
answers each choice apart. Nothing here reads HTTP: the routes hand over what the
call said (``CallOptions``) and wrap the answer in a response."""
