"""The operator's HTTP surface over the agent's revision store: a JSON API (OpenAPI schema at
``/api/openapi.json``) and a server-rendered status page at ``/``.

Layer: surfaces (beside the CLI). Reads go straight to the `RevisionStore`; every action calls the
`Agent` (the same methods ``autosched agent ...`` calls), so the CLI and the service can act on one
state directory at the same time. Needs the ``service`` extra (FastAPI, uvicorn); importing this
package does not import them, `autosched.service.app` does.
"""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8750
TOKEN_FILE = "service.token"
