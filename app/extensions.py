"""Extension singletons; the factory binds them to an app with init_app."""

from typing import TYPE_CHECKING

from flask import Flask, current_app
from flask_htmx import HTMX
from flask_login import LoginManager
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from flask_wtf.csrf import CSRFProtect
from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


db = SQLAlchemy(model_class=Base)
if TYPE_CHECKING:
    Model = Base  # what type checkers see: `db.Model` is Flask-SQLAlchemy's subclass of Base, made at runtime
else:
    Model = db.Model
migrate = Migrate()
login_manager = LoginManager()
csrf = CSRFProtect()
htmx = HTMX()


def current_app_object() -> Flask:
    """The app behind the `current_app` proxy, for work that outlives the app context (threads, per-app caches)."""
    # Flask types the proxy as the Flask class itself, so the proxy's own method is invisible to type checkers.
    return current_app._get_current_object()  # type: ignore[attr-defined]
