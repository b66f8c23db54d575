"""The one Jinja2 environment of every HTML page: the run report, the reader-study report and the reader app.

Templates live in ``report/templates/`` (the page skeleton ``page.html``, the building blocks ``macros.html``
and the one stylesheet ``style.css``, inlined so a report opens from disk with nothing loaded from the network);
the reader app adds its own template folder to the same loader through :func:`environment`. Autoescape is on
everywhere: a value reaches the page escaped unless it is :func:`trusted` markup (a figure's SVG, a section
built by the helpers), so a new section cannot forget to escape. Jinja2 is imported on first use only.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import jinja2
    from markupsafe import Markup

__all__ = ["environment", "macro", "render", "snippet", "stylesheet", "trusted"]

#: the package whose ``templates/`` folder every environment loads first (the skeleton, macros and stylesheet)
_BASE = "medvlm_audit.report"


@cache
def environment(*packages: str) -> jinja2.Environment:
    """The shared environment: autoescape on, undefined names are errors, templates from ``report/templates``
    and then from each named package's ``templates/`` folder (e.g. the reader app's). Cached per package list.

    A page template of a package may not reuse a name of ``report/templates`` (the report's would shadow it).
    """
    import jinja2

    loaders = [jinja2.PackageLoader(p, "templates") for p in (_BASE, *packages)]
    if len(loaders) > 1:
        base = set(loaders[0].list_templates())
        for pkg, loader in zip(packages, loaders[1:]):
            clash = sorted(base & set(loader.list_templates()))
            if clash:
                raise ValueError(f"templates of {pkg} reuse the report's template names {clash}")
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders) if len(loaders) > 1 else loaders[0],
        autoescape=True,  # every {{ value }} is HTML-escaped unless it is Markup
        undefined=jinja2.StrictUndefined,
    )


def trusted(html: object) -> Markup:
    """Mark a string built by the report helpers (or a figure's SVG) as markup that is not escaped again."""
    from markupsafe import Markup

    return Markup(str(html))


@lru_cache(maxsize=1)
def stylesheet() -> str:
    """The one stylesheet (``report/templates/style.css``) as text."""
    env = environment()
    assert env.loader is not None
    source, _, _ = env.loader.get_source(env, "style.css")
    return source


def render(name: str, **context: Any) -> str:
    """Render one template of the shared environment to a plain string."""
    return environment().get_template(name).render(**context)


def macro(name: str) -> Any:
    """A macro of ``macros.html``; calling it returns the escaped markup (use ``str()`` before concatenating)."""
    return getattr(environment().get_template("macros.html").module, name)


@lru_cache(maxsize=256)
def _compiled(source: str) -> jinja2.Template:
    return environment().from_string(source)


def snippet(source: str, **values: Any) -> str:
    """A small piece of markup written inline as a template, every value escaped: the way for a section to write
    its own HTML without calling ``escape`` at each value. Helper output passed in must be :func:`trusted`.

    >>> snippet("<p>{{ n }} items of <b>{{ name }}</b></p>", n=3, name="<x>")
    '<p>3 items of <b>&lt;x&gt;</b></p>'
    >>> snippet("<li>{{ badge }} {{ text }}</li>", badge=trusted('<span class="badge">ok</span>'), text="a & b")
    '<li><span class="badge">ok</span> a &amp; b</li>'
    """
    return _compiled(source).render(**values)
