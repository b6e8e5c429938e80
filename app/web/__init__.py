"""Blueprints, thin: load -> authorize -> validate -> one service call -> one commit -> respond."""
