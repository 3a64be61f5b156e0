/** nbtrain's icons (themeable: the `jp-icon3` class takes the theme's icon colour). */

import { LabIcon } from "@jupyterlab/ui-components";

/** Four ranks of a gang: the runs panel's tab. */
export const runsIcon = new LabIcon({
  name: "nbtrain:runs",
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<rect x="3" y="3" width="7.5" height="7.5" rx="1.5"/><rect x="13.5" y="3" width="7.5" height="7.5" rx="1.5"/>' +
    '<rect x="3" y="13.5" width="7.5" height="7.5" rx="1.5"/><rect x="13.5" y="13.5" width="7.5" height="7.5" rx="1.5"/>' +
    "</g></svg>",
});

/** Run, fanned out to two ranks: "Run cell distributed…". */
export const runDistributedIcon = new LabIcon({
  name: "nbtrain:run-distributed",
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<path d="M3 4v16l11-8z"/><rect x="16" y="4" width="5.5" height="5.5" rx="1"/>' +
    '<rect x="16" y="14.5" width="5.5" height="5.5" rx="1"/>' +
    "</g></svg>",
});

/** A notebook becoming a job directory: "Export notebook as training job". */
export const exportJobIcon = new LabIcon({
  name: "nbtrain:export-job",
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<path d="M4 3h9l4 4v4h-2V8h-3V5H6v14h6v2H4z"/><path d="M15 13h2v5h3l-4 4-4-4h3z"/>' +
    "</g></svg>",
});
