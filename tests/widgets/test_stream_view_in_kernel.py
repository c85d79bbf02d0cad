"""StreamView over an AsyncBroker inside a real Jupyter kernel (nbclient, as papermill runs the
notebooks): the view is made in a cell, where the kernel's event loop is running; it reads on
that loop once the cell returns, and a later cell awaits it with top-level ``await``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient


@pytest.mark.timeout(120)
def test_in_a_kernel_the_view_reads_on_the_kernels_loop(healthy: Any, tmp_path: Path) -> None:
    model = f"LLMConfig(name='a', base_url={healthy.base_url!r}, model='a')"
    cells = [
        "from jevlaya_lab.broker import AsyncBroker, LLMConfig\n"
        "from jevlaya_lab.widgets import StreamView\n"
        f"broker = AsyncBroker({str(tmp_path / 'kernel.db')!r}, models=[{model}], catalog=[])\n"
        "view = StreamView(broker, 'hello', max_tokens=6)\n"
        "view.status",
        "assert await view.wait_async(30)\n"
        "lane = view.lanes[0]\n"
        "print(view.status, lane['model'], lane['state'], lane['text'] == view.stream.text)",
        "await broker.aclose()",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=60, kernel_name="python3").execute()
    (made,) = [o for o in notebook.cells[0].outputs if o["output_type"] == "execute_result"]
    assert made["data"]["text/plain"] == "'waiting'"  # the cell did not wait for the stream
    printed = "".join(o["text"] for o in notebook.cells[1].outputs if o.get("name") == "stdout")
    assert printed.split() == ["done", "a", "won", "True"]
