"""``jupyter nbconvert --to nbtrain NOTEBOOK.ipynb``: the notebook's job cell as a job directory.

Registered under the ``nbconvert.exporters`` entry point ``nbtrain`` (JupyterLab's "Save and Export Notebook As"
menu leaves it out: the lab plugin's ``nbtrain:export-notebook`` is the lab's one export command). nbconvert exporters return one body plus resources; the body is
the job's README.md, written as ``<notebook>-job/README.md`` (the output "extension"), and every
other file of the job directory travels in ``resources["outputs"]`` under ``<notebook>-job/``, which
nbconvert's FilesWriter writes next to the notebook (and the server's download zips).

Options (traitlets): ``--NbtrainExporter.cell=ID``, ``--NbtrainExporter.tag=TAG``,
``--NbtrainExporter.strict=True`` (see ``nbtrain export``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbconvert.exporters import Exporter
from traitlets import Bool, Unicode, default

__all__ = ["NbtrainExporter"]


class NbtrainExporter(Exporter):
    """Export the notebook's ``%%distributed`` cell (or ``cell``/``tag``) as an nbtrain job directory."""

    export_from_notebook = "nbtrain job"
    output_mimetype = "text/markdown"

    cell = Unicode(None, allow_none=True, help="Cell id or 1-based position of the job cell.").tag(config=True)
    tag = Unicode(None, allow_none=True, help="Tag of the job cell (instead of %%distributed).").tag(config=True)
    strict = Bool(False, help="Refuse values computed in the notebook instead of re-running them.").tag(config=True)

    @default("file_extension")
    def _file_extension_default(self) -> str:
        return ".md"

    def from_notebook_node(  # type: ignore[override]  # text exporters return str (as TemplateExporter does)
        self, nb: Any, resources: dict[str, Any] | None = None, **kw: Any
    ) -> tuple[str, dict[str, Any]]:
        """Return (README.md text, resources with every other job file under ``outputs``).

        Raises nbtrain's CaptureError/SpecError with the reason when the notebook cannot be exported.
        """
        from .static import notebook_job

        nb_copy, resources = super().from_notebook_node(nb, resources, **kw)
        metadata = resources.get("metadata", {}) or {}
        name = str(metadata.get("name") or "notebook")
        path = str(Path(str(metadata.get("path") or "")) / f"{name}.ipynb")
        result = notebook_job(nb_copy, path=path, cell=self.cell, tag=self.tag, strict=self.strict)
        folder = f"{name}-job"
        outputs = resources.setdefault("outputs", {})
        for rel, data in result.job.files.items():
            if rel != "README.md":
                outputs[f"{folder}/{rel}"] = data
        resources["output_extension"] = "-job/README.md"
        return result.job.files["README.md"].decode("utf-8"), resources
