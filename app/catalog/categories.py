"""How a catalog category's slug reads to people ("ai" -> "AI", "project-management" -> "Project management").

Definitions name categories by slug; this is the one place that turns a slug into its label, so the Apps filters and
anything else that shows a category agree. A slug without its own label reads as words, with acronyms kept upper case.
"""

from __future__ import annotations

# Slugs whose label is not just their words capitalised.
CATEGORY_LABELS = {
    "ai": "AI",
    "crm": "CRM",
    "imported": "Imported",
}
# Words kept upper case wherever they appear in a slug ("ai-agents" -> "AI agents").
ACRONYMS = frozenset({"ai", "api", "cms", "crm", "erp", "hr", "it", "llm", "mcp", "seo", "sql", "ui", "ux"})


def category_label(slug: str) -> str:
    if slug in CATEGORY_LABELS:
        return CATEGORY_LABELS[slug]
    words = [w for w in slug.split("-") if w]
    if not words:
        return slug
    shown = [w.upper() if w in ACRONYMS else w for w in words]
    if shown[0] == words[0]:
        shown[0] = shown[0].capitalize()
    return " ".join(shown)
