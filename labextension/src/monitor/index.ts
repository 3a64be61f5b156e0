/**
 * nbtrain's monitor widget: an anywidget front-end module (AFM).
 *
 * `render({ model, el })` draws one view of a run's monitor and returns its cleanup function.
 * Plain DOM plus uPlot, no JupyterLab API: the same module works in JupyterLab 4 and Notebook 7.
 * The contract with the Python side is nbtrain/widgets/PROTOCOL.md.
 */

import { Monitor } from "./monitor";
import type { WidgetModel } from "./protocol";

interface RenderProps {
  model: WidgetModel;
  el: HTMLElement;
}

function render({ model, el }: RenderProps): () => void {
  const monitor = new Monitor(model, el);
  return () => monitor.dispose();
}

export default { render };
