/**
 * "Open monitor": the run's live monitor in the main area, notebook-independent.
 *
 * It opens a console on a fresh kernel and runs the run's attach code there
 * (`run = nbtrain.attach(ID); run.show()`), so the view is the very monitor widget a notebook shows —
 * the same ES module (nbtrain/widgets/static/monitor.js) fed by the same Python view-model through
 * the run's watcher — with no second implementation of the protocol in the browser. The console stays
 * usable (`run.logs(rank=1)`, `run.cancel()`), and its kernel is shut down when the tab closes.
 * One monitor per run: opening it again brings the existing tab forward.
 */

import type { JupyterFrontEnd } from "@jupyterlab/application";
import type { ConsolePanel } from "@jupyterlab/console";

import type { RunSummary } from "./wire";

const open = new Map<string, ConsolePanel>();

export async function openMonitor(app: JupyterFrontEnd, run: RunSummary): Promise<ConsolePanel> {
  const existing = open.get(run.id);
  if (existing !== undefined && !existing.isDisposed) {
    app.shell.activateById(existing.id);
    return existing;
  }
  const specs = app.serviceManager.kernelspecs.specs;
  const kernel = specs?.kernelspecs.python3 !== undefined ? "python3" : (specs?.default ?? "python3");
  const panel = (await app.commands.execute("console:create", {
    name: `Monitor ${run.id}`,
    kernelPreference: { name: kernel, shouldStart: true, canStart: true, shutdownOnDispose: true },
    activate: true,
  })) as ConsolePanel;
  panel.addClass("nbtrain-MonitorConsole");
  panel.node.dataset.nbtrainRun = run.id;
  open.set(run.id, panel);
  panel.disposed.connect(() => {
    if (open.get(run.id) === panel) open.delete(run.id);
  });
  await panel.sessionContext.ready;
  if (!panel.isDisposed) await panel.console.inject(run.attachCode);
  return panel;
}
