// Draws the charts of an answer with vendored vega-embed. Vega compiles expressions with Function()
// unless given an interpreter; the page's CSP forbids that, so expressions are interpreted.
import { expressionInterpreter } from "./vendor/vega-interpreter-2.3.2.module.js";

const dark = () => window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;

export async function drawChart(container, chart) {
  const options = {
    ast: true,
    expr: expressionInterpreter,
    renderer: "svg",
    defaultStyle: false, // its stylesheet is in app.css: the CSP allows no injected <style>
    tooltip: false,
    theme: dark() ? "dark" : undefined,
    actions: { export: true, source: false, compiled: false, editor: false },
    downloadFileName: chart.id,
  };
  const result = await window.vegaEmbed(container, chart.spec, options);
  return result.view;
}

window.drawChart = drawChart;
