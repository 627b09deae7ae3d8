"""An OpenAI-compatible HTTP frontend in front of a running Triton deployment (local or remote).

Three layers, as in Triton's own frontend: `schemas` (the protocol as pydantic models), `routers` (one per
endpoint group: models, chat, completions, observability), `engine` (requests -> Triton over tritonclient's
asyncio gRPC protocol). `service` holds what chat and completions share; `app` wires them; `server` runs uvicorn.
"""
