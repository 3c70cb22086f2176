"""Web layer: the Flask app that carries the API and dashboard blueprints."""

from headgate.web.app import create_app
from headgate.web.globals import STORE_KEY, begin_stopping, get_store

__all__ = ["STORE_KEY", "begin_stopping", "create_app", "get_store"]
