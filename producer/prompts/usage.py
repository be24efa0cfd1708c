"""Prefix-cache hit rates of registered prompts, read from job rows."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, func, select

from schemas.tables import Job

# A job whose cached tokens cover this share of its system prompt is a hit: the last
# partial block of a prefix is never cached, so a hit is never exactly 100%.
HIT_SHARE = 0.9


@dataclass(frozen=True)
class PromptUsage:
    jobs: int
    hits: int

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.jobs if self.jobs else None


def prompt_usage(engine: Engine, prompt_tokens: dict[str, int]) -> dict[str, PromptUsage]:
    """Per pinned prompt reference (``name@version``): finished jobs and prefix-cache hits.

    ``prompt_tokens`` is each reference's token count; a job is a hit when its cached
    prompt tokens reach :data:`HIT_SHARE` of it. One grouped query: cached counts come
    in whole blocks, so there are few distinct values per prompt.
    """
    ref = Job.request["system_prompt"].as_string()
    query = (
        select(ref, Job.cached_prompt_tokens, func.count())
        .where(Job.cached_prompt_tokens.is_not(None), ref.is_not(None))
        .group_by(ref, Job.cached_prompt_tokens)
    )
    jobs: dict[str, int] = {}
    hits: dict[str, int] = {}
    with engine.connect() as connection:
        for name, cached, number in connection.execute(query):
            jobs[name] = jobs.get(name, 0) + number
            size = prompt_tokens.get(name)
            if size and cached >= HIT_SHARE * size:
                hits[name] = hits.get(name, 0) + number
    return {name: PromptUsage(jobs[name], hits.get(name, 0)) for name in jobs}
