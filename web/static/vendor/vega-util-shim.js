// vega-interpreter-2.3.2.module.js imports these from the `vega-util` package; the vendored UMD
// build of vega (vega-6.4.0.min.js, loaded first) exposes the same functions on window.vega.
const { ascending, isString, DisallowedObjectProperties } = window.vega;
export { ascending, isString, DisallowedObjectProperties };
