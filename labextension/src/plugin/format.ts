/** Text for the runs panel and the status bar (pure). */

import { formatDuration } from "../monitor/format";
import type { ExportResult, RunState, RunSummary } from "./wire";
import { isActive } from "./wire";

export { formatDuration };

const LABELS: Record<RunState, string> = {
  pending: "Pending",
  queued: "Queued",
  starting: "Starting",
  running: "Running",
  stalled: "Stalled",
  succeeded: "Succeeded",
  failed: "Failed",
  cancelled: "Cancelled",
};

export function stateText(state: RunState): string {
  return LABELS[state];
}

/**
 * Seconds the run has lasted: its final duration once ended, else the server's figure plus the time
 * since the row arrived (so a skewed browser clock does not matter).
 */
export function liveDuration(run: RunSummary, receivedAt: number, now: number): number {
  if (!isActive(run.state)) return run.duration;
  return run.duration + Math.max(0, now - receivedAt);
}

/** `14:03:07` today, `Nov 28 14:03` before. */
export function formatStart(epochSeconds: number | null, now: Date = new Date()): string {
  if (epochSeconds === null) return "";
  const when = new Date(epochSeconds * 1000);
  const pad = (n: number): string => String(n).padStart(2, "0");
  const time = `${pad(when.getHours())}:${pad(when.getMinutes())}`;
  if (when.toDateString() === now.toDateString()) return `${time}:${pad(when.getSeconds())}`;
  const month = when.toLocaleString("en", { month: "short" });
  return `${month} ${when.getDate()} ${time}`;
}

/** `local · 1 × 2 = 2 ranks`. */
export function gangText(run: RunSummary): string {
  const ranks = run.worldSize === 1 ? "1 rank" : `${run.worldSize} ranks`;
  return `${run.backend} · ${run.nodes} × ${run.procs} = ${ranks}`;
}

/** `step 42 / 100`, `step 42`, or `` before the first step. */
export function stepText(run: RunSummary): string {
  if (run.step === null) return "";
  return run.total !== null ? `step ${run.step} / ${run.total}` : `step ${run.step}`;
}

/** The status bar's words: `nbtrain: 2 active runs`. */
export function activeRunsText(count: number): string {
  return `nbtrain: ${count} active ${count === 1 ? "run" : "runs"}`;
}

/** The files an export toast names first (JupyterLab cuts a notification's text at 140 characters). */
const KEY_EXPORT_FILES = ["train.py", "README.md", "job.sbatch"];

/** "Exported cell 2 of a.ipynb to a-job/: train.py, README.md, job.sbatch and 7 more" (the notification of an export).
 * The cell is named by its position only: a JupyterLab cell id is a 36-character UUID, and a notification's text is
 * cut at 140 characters, which would cut the key files off. */
export function exportMessage(notebook: string, job: ExportResult, saved = false): string {
  const key = KEY_EXPORT_FILES.filter((name) => job.files.includes(name));
  const more = job.files.length - key.length;
  const names = key.length > 0 ? key.join(", ") + (more > 0 ? ` and ${more} more` : "") : `${more} files`;
  const cell = job.cell?.replace(/ \(id [^)]*\)$/, "");
  const what = cell !== undefined ? `${cell} of ${notebook}` : notebook;
  const notes = (job.notes ?? []).map((note) => ` ${note}`).join("");
  return `${saved ? `Saved ${notebook}, then exported` : "Exported"} ${what} to ${job.path}/: ${names}${notes}`;
}

/** The Resume button's tooltip in the runs panel: what it does, or why it is disabled. */
export function resumeCaption(run: RunSummary | undefined): string {
  if (run === undefined) return "Relaunch the run from its latest checkpoint";
  if (isActive(run.state)) return `Resume is for a run that ended; ${run.id} is still ${run.state}`;
  if (run.state === "succeeded") return `${run.id} succeeded: there is nothing to resume (run the cell again for a new run)`;
  if (run.canResume) return "Relaunch the run from its latest checkpoint";
  return (
    `${run.id} saved no checkpoint, so it cannot resume: a resume continues from the latest checkpoint ` +
    "(nbtrain.save_checkpoint(accelerator, step) in the cell saves one). Run the cell again to start over."
  );
}

/** "digits (digits-3fa9c2) failed: rank 1 (node 0) failed: ValueError: boom" (the toast of a run that failed). */
export function failureMessage(run: RunSummary): string {
  const text = `${run.name} (${run.id}) failed${run.failure ? `: ${run.failure}` : ""}`;
  return text.length > 140 ? `${text.slice(0, 139)}…` : text; // JupyterLab cuts a notification at 140 characters
}
