"""The image's HEALTHCHECK: healthy while JupyterLab answers on its port (GET /api needs no token)."""
import os
import sys
import urllib.request

PORT = os.environ.get("JUPYTER_PORT", "8888")

try:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/api", timeout=5) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError as err:
    print(f"JupyterLab does not answer on port {PORT}: {err}")
    sys.exit(1)
