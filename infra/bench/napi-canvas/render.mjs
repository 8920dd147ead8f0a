// The peer of the icons benchmark: draws the four app icons with @napi-rs/canvas, the renderer
// of the TypeScript platform, following the same drawing rules as functions/icons.
//
//   node render.mjs            one run: the worker request on stdin, {icons, fallback, maxRssKib}
//                              on stdout
//   node render.mjs warm N     the request on stdin, one warm-up run, then N timed runs in this
//                              process; prints {"ms": [...], "maxRssKib": n} on stdout

import { createCanvas, loadImage } from "@napi-rs/canvas";

const readStdin = async () => {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
};

// The root width or height in plain pixels, or undefined.
const rootPixels = (attributes, name) => {
  const found = attributes.match(new RegExp(`\\s${name}\\s*=\\s*(?:"([^"]*)"|'([^']*)'|([^\\s>]+))`, "i"));
  if (!found) return undefined;
  const value = (found[1] ?? found[2] ?? found[3]).trim();
  return /^\d+(\.\d+)?(px)?$/i.test(value) ? parseFloat(value) : undefined;
};

// Resizes the root <svg> to size x size (adding a viewBox from its pixel size when it has none).
const svgAtSize = (svg, size) =>
  svg.replace(/<svg\b([^>]*)>/i, (tag, attributes) => {
    const hasViewBox = /\sviewBox\s*=/i.test(attributes);
    const w = rootPixels(attributes, "width");
    const h = rootPixels(attributes, "height");
    if (!hasViewBox && (w === undefined || h === undefined)) return tag;
    let kept = attributes.replace(/\s(width|height)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)/gi, "");
    if (!hasViewBox) kept += ` viewBox="0 0 ${w} ${h}"`;
    return `<svg${kept} width="${size}" height="${size}">`;
  });

const decode = (bytes, mime, box) =>
  loadImage(mime === "image/svg+xml" ? Buffer.from(svgAtSize(bytes.toString("utf8"), box)) : bytes);

const renderAll = async (request) => {
  const source = Buffer.from(request.source, "base64");
  const icons = {};
  let fallback = false;
  for (const variant of request.variants) {
    const box = Math.round(variant.size * variant.box);
    let image;
    if (!fallback) {
      try {
        image = await decode(source, request.mime, box);
        if (!(image.width > 0 && image.height > 0)) image = undefined;
      } catch {
        image = undefined;
      }
    }
    if (!image) {
      fallback = true;
      image = await decode(Buffer.from(request.fallback), "image/svg+xml", box);
    }
    const canvas = createCanvas(variant.size, variant.size);
    const context = canvas.getContext("2d");
    if (variant.background) {
      context.fillStyle = variant.background;
      context.fillRect(0, 0, variant.size, variant.size);
    }
    context.imageSmoothingEnabled = true;
    context.imageSmoothingQuality = "high";
    const scale = Math.min(box / image.width, box / image.height);
    const w = image.width * scale;
    const h = image.height * scale;
    context.drawImage(image, (variant.size - w) / 2, (variant.size - h) / 2, w, h);
    icons[variant.id] = canvas.toBuffer("image/png").toString("base64");
  }
  return { icons, fallback };
};

const request = JSON.parse(await readStdin());
if (process.argv[2] === "warm") {
  const runs = Number(process.argv[3] ?? 20);
  await renderAll(request);
  const ms = [];
  for (let i = 0; i < runs; i += 1) {
    const started = process.hrtime.bigint();
    await renderAll(request);
    ms.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  process.stdout.write(JSON.stringify({ ms, maxRssKib: process.resourceUsage().maxRSS }));
} else {
  process.stdout.write(JSON.stringify({ ...(await renderAll(request)), maxRssKib: process.resourceUsage().maxRSS }));
}
