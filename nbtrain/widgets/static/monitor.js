// Placeholder until the TypeScript front end (labextension/src/monitor) is built into this file.
export default {
  render({ model, el }) {
    const update = () => { el.textContent = `nbtrain ${model.get("header").run_id || ""}: ${model.get("header").state || ""}`; };
    model.on("change:header", update);
    update();
    model.send({ type: "hello" });
  },
};
