"""Accounting objects (cluster, accounts, users, QOS): plan, diff and apply."""
