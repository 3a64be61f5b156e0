/** The status bar item: the number of active runs; a click opens the runs panel. */

import { Widget } from "@lumino/widgets";

import { activeRunsText } from "./format";
import type { RunsModel } from "./runs-model";

export class ActiveRunsItem extends Widget {
  constructor(
    private readonly model: RunsModel,
    onClick: () => void,
  ) {
    super();
    this.addClass("nbtrain-StatusItem");
    this.addClass("jp-StatusBar-TextItem");
    this.node.dataset.testid = "nbtrain-status-active";
    this.node.title = "nbtrain runs that are pending, queued, starting, running or stalled — click for the runs panel";
    this.node.addEventListener("click", onClick);
    model.changed.connect(this.render);
    this.render();
  }

  override dispose(): void {
    this.model.changed.disconnect(this.render);
    super.dispose();
  }

  private readonly render = (): void => {
    const count = this.model.activeCount;
    this.node.textContent = activeRunsText(count);
    this.node.dataset.count = String(count);
    this.toggleClass("nbtrain-mod-active", count > 0);
  };
}
