"""Celery apps that ``bench/tos_turn.py`` starts instead of the vessel app."""
