"""Interaction cards in task threads: the connection card (with its setup dialog) and tool approval cards."""
