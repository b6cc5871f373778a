"""Printers of plans: plain text (:mod:`.text`), LaTeX and Markdown (:mod:`.latex`).

They read a plan's attributes and each step's operation; they never import the plan class, so the plan
(one layer up) can offer ``str(plan)``, ``plan.to_latex()`` and ``plan.to_markdown()`` through them.
"""
