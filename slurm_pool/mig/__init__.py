"""MIG hardware rules (as data), placement checking and planning.  Pure."""
