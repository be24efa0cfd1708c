"""Picking a tier for ``tier="auto"``: a static-embedding classifier and the routing policy.

The classifier runs in the producer on every auto-routed submit, so it must be fast
and must not need torch: it embeds text with a table of per-token vectors distilled
once from all-MiniLM-L6-v2 (a lookup and a mean), then applies a small softmax head.
"""
