// Typesets one page's formulas at build time: MathJax 3 (mathjax-full, vendored by the Makefile)
// in Node, TeX in, CommonHTML out, each formula with its assistive MathML for screen readers.
//
// stdin:  {"formulas": [{"tex": "x^2", "display": false}, ...],
//          "macros": {"softmax": "\\operatorname{softmax}"}, "fontURL": "../_static/..."}
// stdout: {"html": ["<mjx-container ...>", ...], "css": "the stylesheet of the characters used"}
//
// Called by _ext/course_pages.py once per page; the page then loads no MathJax script.
"use strict";

const path = require("path");
const MATHJAX = process.env.MATHJAX_FULL;
const load = (name) => require(path.join(MATHJAX, "js", name));

const { mathjax } = load("mathjax.js");
const { TeX } = load("input/tex.js");
const { CHTML } = load("output/chtml.js");
const { liteAdaptor } = load("adaptors/liteAdaptor.js");
const { RegisterHTMLHandler } = load("handlers/html.js");
const { AssistiveMmlHandler } = load("a11y/assistive-mml.js");
load("input/tex/AllPackages.js");

// The packages MathJax's browser build has loaded or autoloads (input/tex.js), without
// noerrors: a TeX error must show as an error node, which the extension reports.
const PACKAGES = ["base", "ams", "newcommand", "noundefined", "configmacros", "boldsymbol",
  "braket", "cancel", "cases", "centernot", "color", "bbox", "enclose", "extpfeil", "html",
  "upgreek", "unicode"];

function typeset(request) {
  const adaptor = liteAdaptor();
  AssistiveMmlHandler(RegisterHTMLHandler(adaptor));
  const tex = new TeX({ packages: PACKAGES, macros: request.macros || {} });
  const chtml = new CHTML({ fontURL: request.fontURL, adaptiveCSS: true });
  const page = mathjax.document("", { InputJax: tex, OutputJax: chtml });
  const html = request.formulas.map(
    (f) => adaptor.outerHTML(page.convert(f.tex, { display: f.display })));
  return { html, css: adaptor.textContent(chtml.styleSheet(page)) };
}

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  process.stdout.write(JSON.stringify(typeset(JSON.parse(input))));
});
