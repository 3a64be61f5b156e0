/**
 * The `nbtrain:*` commands. The panel's buttons, the palette, the notebook toolbar and the context
 * menus all execute these, with `{ runId }` for the per-run ones.
 */

import type { JupyterFrontEnd } from "@jupyterlab/application";
import { Clipboard, Dialog, Notification, showDialog, showErrorMessage } from "@jupyterlab/apputils";
import type { INotebookTracker, NotebookPanel } from "@jupyterlab/notebook";
import { NotebookActions } from "@jupyterlab/notebook";
import type { ReadonlyPartialJSONObject } from "@lumino/coreutils";

import { CommandIDs } from "./commands-ids";
import type { DistributedChoice } from "./dialogs";
import { DistributedForm, RunPicker } from "./dialogs";
import { NO_MLFLOW_PAGE } from "../monitor/format";
import { exportMessage, resumeCaption } from "./format";
import { exportJobIcon, runDistributedIcon } from "./icons";
import { isDistributedCell, loadsExtension, readLine, withMagicLine } from "./magic-line";
import type { ProfileCatalog } from "./profiles";
import { openMonitor } from "./monitor";
import type { RunsModel } from "./runs-model";
import type { RunSummary } from "./wire";
import { isActive } from "./wire";

export { CommandIDs };

export interface CommandContext {
  app: JupyterFrontEnd;
  model: RunsModel;
  notebooks: INotebookTracker | null;
  /** Bring the runs panel forward. */
  showRuns: () => void;
}

const INSERT_ONLY = "nbtrain-insert-only";

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function runIdOf(args: ReadonlyPartialJSONObject): string | null {
  const id = args.runId;
  return typeof id === "string" && id !== "" ? id : null;
}

/** The run a per-run command is about: from the model, else asked from the server. */
async function findRun(context: CommandContext, args: ReadonlyPartialJSONObject): Promise<RunSummary | null> {
  const id = runIdOf(args);
  if (id === null) return null;
  const known = context.model.get(id);
  if (known !== undefined) return known;
  const run = await context.model.api.run(id);
  context.model.update([run]);
  return run;
}

/** A notification that says `pending` until `promise` settles, then its outcome; returns the promise. */
async function progress<T>(promise: Promise<T>, pending: string, ok: (value: T) => string,
  failed: (error: unknown) => string): Promise<T> {
  const id = Notification.emit(pending, "in-progress", { autoClose: false });
  try {
    const value = await promise;
    Notification.update({ id, message: ok(value), type: "success", autoClose: 4000 });
    return value;
  } catch (error) {
    Notification.update({ id, message: failed(error), type: "error", autoClose: false });
    throw error;
  }
}

/** Runs the dialog's choice on `panel`'s active code cell: write the magic line, then (unless insert-only) run. */
async function runCellDistributed(context: CommandContext, panel: NotebookPanel): Promise<void> {
  const notebook = panel.content;
  const cell = notebook.activeCell;
  if (cell?.model.type !== "code") {
    await showErrorMessage("Run cell distributed", "Select a code cell first: its code becomes the gang's code.");
    return;
  }
  const model = notebook.model;
  if (model === null) return;
  const sources = Array.from(model.cells, (c) => c.sharedModel.getSource());
  const addsLoadExt = !loadsExtension(sources);
  // the profiles the kernel's magic can name (with the nbtrain.toml beside the notebook); without them, the form
  // still works and says why there are none
  const catalog: ProfileCatalog | string = await context.model.api.profiles(panel.context.path)
    .catch((error: unknown) => message(error));
  const result = await showDialog<DistributedChoice>({
    title: "Run cell distributed",
    body: new DistributedForm(readLine(cell.model.sharedModel.getSource()), addsLoadExt, catalog),
    buttons: [
      Dialog.cancelButton(),
      Dialog.okButton({ label: "Insert line", caption: "Write the line, do not run", actions: [INSERT_ONLY] }),
      Dialog.okButton({ label: "Run", caption: "Write the line and run the cell" }),
    ],
    defaultButton: 2,
    focusNodeSelector: "input",
  });
  if (!result.button.accept || result.value === null || cell.isDisposed) return;

  const { options, preset } = result.value;
  cell.model.sharedModel.setSource(withMagicLine(cell.model.sharedModel.getSource(), options, preset));
  let index = notebook.widgets.indexOf(cell);
  if (addsLoadExt && index >= 0) {
    model.sharedModel.insertCell(index, { cell_type: "code", source: "%load_ext nbtrain", metadata: {} });
    index += 1;
  }
  const runOnly = async (at: number): Promise<void> => {
    notebook.deselectAll();
    notebook.activeCellIndex = at;
    await NotebookActions.run(notebook, panel.sessionContext);
  };
  if (result.button.actions.includes(INSERT_ONLY)) {
    notebook.deselectAll();
    notebook.activeCellIndex = index;
    return;
  }
  if (addsLoadExt) await runOnly(index - 1);
  await runOnly(index);
}

async function exportNotebook(context: CommandContext, panel: NotebookPanel): Promise<void> {
  // the server exports the file on disk: save first so the job is what the user sees (and say so)
  const saved = panel.context.model.dirty;
  if (saved) await panel.context.save();
  const path = panel.context.path;
  // the %%distributed cell the user is on; on another cell, the server's choice (the last), named in the message
  const active = panel.content.activeCell;
  const cell = active !== null && isDistributedCell(active.model.sharedModel.getSource()) ? active.model.id : undefined;
  const id = Notification.emit(`Exporting ${path} as a training job…`, "in-progress", { autoClose: false });
  try {
    const job = await context.model.api.exportNotebook(path, cell);
    Notification.update({
      id,
      message: exportMessage(path, job, saved),
      type: "success",
      autoClose: 10000,
      actions: [
        {
          label: "Show in file browser",
          callback: () => void context.app.commands.execute("filebrowser:go-to-path", { path: job.path }),
        },
      ],
    });
  } catch (error) {
    Notification.update({ id, message: `Export of ${path} failed: ${message(error)}`, type: "error", autoClose: false });
  }
}

async function attachRun(context: CommandContext, args: ReadonlyPartialJSONObject): Promise<void> {
  let runId = runIdOf(args);
  if (runId === null) {
    if (!context.model.loaded) await context.model.refresh();
    const runs = context.model.runs;
    if (runs.length === 0) {
      Notification.info("There is no run to attach to yet.", { autoClose: 5000 });
      return;
    }
    const picked = await showDialog<string>({
      title: "Attach to run",
      body: new RunPicker(runs, runs.find((r) => isActive(r.state))?.id ?? runs[0]?.id),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: "Attach" })],
    });
    if (!picked.button.accept || picked.value === null) return;
    runId = picked.value;
  }
  const run = await findRun(context, { runId });
  if (run === null) return;
  const panel = context.notebooks?.currentWidget ?? null;
  if (panel === null || context.app.shell.currentWidget !== panel) {
    await openMonitor(context.app, run);
    return;
  }
  // in the notebook: a new cell below the active one, holding the attach code, run at once
  const notebook = panel.content;
  NotebookActions.insertBelow(notebook);
  const cell = notebook.activeCell;
  if (cell === null) return;
  cell.model.sharedModel.setSource(run.attachCode);
  await NotebookActions.run(notebook, panel.sessionContext);
}

export function registerCommands(context: CommandContext): void {
  const { app, model, notebooks } = context;
  const { commands } = app;
  const pending = new Set<string>();
  const current = (): NotebookPanel | null => notebooks?.currentWidget ?? null;
  const notify = (error: unknown, what: string): void => {
    void showErrorMessage(what, message(error));
  };

  commands.addCommand(CommandIDs.runCellDistributed, {
    label: "Run cell distributed…",
    caption: "Write a %%distributed line (nodes, GPUs, backend, strategy) on top of the active cell and run it",
    icon: runDistributedIcon,
    isEnabled: () => current()?.content.activeCell?.model.type === "code",
    execute: async () => {
      const panel = current();
      if (panel !== null) await runCellDistributed(context, panel).catch((e: unknown) => notify(e, "Run cell distributed"));
    },
  });

  commands.addCommand(CommandIDs.exportNotebook, {
    label: "Export notebook as training job",
    caption: "Write the active %%distributed cell (else the notebook's last) as a job directory (train.py, job spec, manifests) beside it",
    icon: exportJobIcon,
    isEnabled: () => current() !== null,
    execute: async () => {
      const panel = current();
      if (panel !== null) await exportNotebook(context, panel).catch((e: unknown) => notify(e, "Export notebook"));
    },
  });

  commands.addCommand(CommandIDs.attachRun, {
    label: (args) => {
      const id = runIdOf(args);
      return id !== null ? `Attach to run ${id}` : "Attach to run…";
    },
    caption: "Get a live handle and monitor of a run (in the notebook, or in a console)",
    execute: (args) => attachRun(context, args).catch((e: unknown) => notify(e, "Attach to run")),
  });

  commands.addCommand(CommandIDs.openMonitor, {
    label: "Open monitor",
    caption: "Open the run's live monitor in the main area (a console attached to the run)",
    isEnabled: (args) => runIdOf(args) !== null,
    execute: async (args) => {
      try {
        const run = await findRun(context, args);
        if (run !== null) await openMonitor(app, run);
      } catch (error) {
        notify(error, "Open monitor");
      }
    },
  });

  commands.addCommand(CommandIDs.cancelRun, {
    label: "Cancel run",
    caption: "End every process of the run",
    isEnabled: (args) => {
      const id = runIdOf(args);
      const run = id !== null ? model.get(id) : undefined;
      return run !== undefined && isActive(run.state) && !pending.has(run.id);
    },
    execute: async (args) => {
      const id = runIdOf(args);
      if (id === null) return;
      const answer = await showDialog({
        title: "Cancel run",
        body: `Cancel ${id}? Every process of its gang is ended; a checkpointed run can be resumed later.`,
        buttons: [Dialog.cancelButton({ label: "Keep running" }), Dialog.warnButton({ label: "Cancel run" })],
      });
      if (!answer.button.accept) return;
      pending.add(id);
      model.update([]); // re-render: the button is disabled while cancelling
      try {
        model.update([await progress(model.api.cancel(id), `Cancelling ${id}…`, (run) => `${run.id}: ${run.state}`,
          (error) => `Cancel of ${id} failed: ${message(error)}`)]);
      } catch {
        // reported by the notification
      } finally {
        pending.delete(id);
        await model.refresh().catch(() => undefined);
      }
    },
  });

  commands.addCommand(CommandIDs.resumeRun, {
    label: "Resume run",
    caption: (args) => {
      const id = runIdOf(args);
      return resumeCaption(id !== null ? model.get(id) : undefined);
    },
    isEnabled: (args) => {
      const id = runIdOf(args);
      const run = id !== null ? model.get(id) : undefined;
      return run?.canResume === true && !pending.has(run.id);
    },
    execute: async (args) => {
      const id = runIdOf(args);
      if (id === null) return;
      pending.add(id);
      model.update([]);
      try {
        model.update([await progress(model.api.resume(id), `Resuming ${id}…`,
          (run) => `${run.id}: ${run.state} (attempt ${run.attempt + 1})`, (error) => `Resume of ${id} failed: ${message(error)}`)]);
      } catch {
        // reported by the notification
      } finally {
        pending.delete(id);
      }
    },
  });

  commands.addCommand(CommandIDs.copyAttachCode, {
    label: "Copy attach code",
    caption: "Copy the Python code that attaches to this run (nbtrain.attach) to the clipboard",
    isEnabled: (args) => runIdOf(args) !== null,
    execute: async (args) => {
      const run = await findRun(context, args).catch(() => null);
      if (run === null) return;
      Clipboard.copyToSystem(run.attachCode);
      Notification.info(`Copied the code that attaches to ${run.id}.`, { autoClose: 3000 });
    },
  });

  commands.addCommand(CommandIDs.openMlflow, {
    label: "Open in MLflow",
    caption: (args) => {
      const id = runIdOf(args);
      const url = id !== null ? model.get(id)?.trackingUrl : null;
      return url ?? NO_MLFLOW_PAGE;
    },
    isEnabled: (args) => {
      const id = runIdOf(args);
      return id !== null && (model.get(id)?.trackingUrl ?? null) !== null;
    },
    execute: (args) => {
      const id = runIdOf(args);
      const url = id !== null ? model.get(id)?.trackingUrl : null;
      if (url !== null && url !== undefined) window.open(url, "_blank", "noopener");
    },
  });

  commands.addCommand(CommandIDs.showRuns, {
    label: "Show distributed runs",
    caption: "Open the Distributed runs panel",
    execute: () => context.showRuns(),
  });
}

