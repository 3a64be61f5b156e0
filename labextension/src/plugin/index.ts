/**
 * nbtrain's JupyterLab plugin: the "Distributed runs" sidebar panel, the `nbtrain:*` commands (palette,
 * notebook toolbar and context menus; the last two declared in schema/plugin.json) and a status bar
 * item with the number of active runs. Everything talks to the server extension's REST API.
 */

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from "@jupyterlab/application";
import { ILayoutRestorer } from "@jupyterlab/application";
import { ICommandPalette, Notification } from "@jupyterlab/apputils";
import { INotebookTracker } from "@jupyterlab/notebook";
import { IStatusBar } from "@jupyterlab/statusbar";

import { NbtrainAPI } from "./api";
import { CommandIDs, registerCommands } from "./commands";
import { FailureWatch } from "./failures";
import { failureMessage } from "./format";
import { RunsPanel } from "./panel";
import { RunsModel } from "./runs-model";
import { ActiveRunsItem } from "./statusbar";

const PALETTE_CATEGORY = "nbtrain";
/** The nbconvert exporter's name (`jupyter nbconvert --to nbtrain`): kept off JupyterLab's export menu and palette. */
const NBCONVERT_FORMAT = "nbtrain";

/**
 * One export command: `nbtrain:export-notebook`. JupyterLab lists every nbconvert exporter under "Save and Export
 * Notebook As" (and in the palette), which would add nbtrain's exporter as a second, different export (a zip of the
 * job directory downloaded, not written beside the notebook): the list the notebook extension reads leaves it out.
 */
function withoutNbconvertExporter(app: JupyterFrontEnd): void {
  const nbconvert = app.serviceManager.nbconvert;
  const formats = nbconvert.getExportFormats.bind(nbconvert);
  nbconvert.getExportFormats = async (...args: Parameters<typeof formats>) => {
    const all = await formats(...args);
    return Object.fromEntries(Object.entries(all).filter(([name]) => name !== NBCONVERT_FORMAT));
  };
}

function activate(
  app: JupyterFrontEnd,
  palette: ICommandPalette | null,
  notebooks: INotebookTracker | null,
  statusBar: IStatusBar | null,
  restorer: ILayoutRestorer | null,
): void {
  withoutNbconvertExporter(app);
  const api = new NbtrainAPI(app.serviceManager.serverSettings);
  const model = new RunsModel({ api });
  const panel = new RunsPanel(model, app.commands, () => api.stats());
  app.shell.add(panel, "left", { rank: 650, type: "Distributed runs" });
  restorer?.add(panel, "nbtrain-runs");
  const showRuns = (): void => app.shell.activateById(panel.id);

  registerCommands({ app, model, notebooks, showRuns });
  for (const command of [CommandIDs.runCellDistributed, CommandIDs.exportNotebook, CommandIDs.attachRun, CommandIDs.showRuns]) {
    palette?.addItem({ command, category: PALETTE_CATEGORY });
  }

  statusBar?.registerStatusItem("nbtrain:active-runs", {
    item: new ActiveRunsItem(model, showRuns),
    align: "left",
    rank: 50,
  });

  // enabled states follow the runs (per-run buttons) and the active cell (toolbar, menus)
  model.changed.connect(() => app.commands.notifyCommandChanged());
  // a run that fails says so wherever the user is looking (a cancelled one gets its toast from Cancel)
  const failures = new FailureWatch();
  model.changed.connect(() => {
    for (const run of failures.newlyFailed(model.runs, model.loaded)) {
      Notification.error(failureMessage(run), {
        autoClose: false,
        actions: [{ label: "Show runs", callback: () => showRuns() }],
      });
    }
  });
  notebooks?.activeCellChanged.connect(() => app.commands.notifyCommandChanged(CommandIDs.runCellDistributed));
  notebooks?.currentChanged.connect(() => app.commands.notifyCommandChanged());

  model.start();
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: "nbtrain:plugin",
  description: "Distributed runs panel, nbtrain commands and the active-runs status item.",
  autoStart: true,
  optional: [ICommandPalette, INotebookTracker, IStatusBar, ILayoutRestorer],
  activate,
};

export default plugin;
