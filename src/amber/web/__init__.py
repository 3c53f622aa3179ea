"""``amber serve``: the JSON API, the dashboard and ``/metrics`` of one process.

``amber.web.server.build(stack, app)`` makes the ASGI application; ``amber serve`` runs
it on uvicorn. Needs the ``web`` extra: ``pip install 'amber[web]'``.
"""
