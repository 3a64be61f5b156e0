/** The `nbtrain:*` command ids (one place, so the panel, the schema and the tests agree). */
export const CommandIDs = {
  runCellDistributed: "nbtrain:run-cell-distributed",
  exportNotebook: "nbtrain:export-notebook",
  attachRun: "nbtrain:attach-run",
  openMonitor: "nbtrain:open-monitor",
  cancelRun: "nbtrain:cancel-run",
  resumeRun: "nbtrain:resume-run",
  copyAttachCode: "nbtrain:copy-attach-code",
  openMlflow: "nbtrain:open-mlflow",
  showRuns: "nbtrain:show-runs",
} as const;
