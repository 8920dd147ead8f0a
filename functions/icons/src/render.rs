//! Drawing the four icons from a logo: SVG through usvg/resvg (locked down: no file or network
//! `href`, no compressed SVG, no fonts), rasters through `image` with decode limits, a tiny-skia
//! canvas, an optional opaque background, high-quality scaling into a centred box, PNG out.

use std::io::Cursor;

use image::{ImageReader, Limits};
use resvg::tiny_skia::{self, FilterQuality, Pixmap, PixmapPaint, Transform};
use resvg::usvg;

use crate::svg::sized_svg;

/// One icon: size in pixels, opaque background (`#rrggbb`) or none, and the side of the centred
/// square the logo fits into, as a fraction of the icon.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VariantSpec {
    pub id: String,
    pub size: u32,
    pub background: Option<String>,
    #[serde(rename = "box")]
    pub box_fraction: f64,
}

/// The mobile app's icons. `any` icons are transparent; the maskable and Apple icons are opaque,
/// because launchers crop maskable icons to their own shape and iOS paints transparency black.
/// The maskable logo stays inside the 40 % safe circle: a centred square of side 0.56 has a
/// half-diagonal of about 0.396.
pub const VARIANTS: [(&str, u32, Option<&str>, f64); 4] = [
    ("pwa-icon-192", 192, None, 0.84),
    ("pwa-icon-512", 512, None, 0.84),
    ("pwa-icon-maskable-512", 512, Some(PWA_CANVAS_LIGHT), 0.56),
    ("apple-touch-icon", 180, Some(PWA_CANVAS_LIGHT), 0.70),
];

/// The light canvas colour of the mobile app (`--k2b-surface-canvas`).
pub const PWA_CANVAS_LIGHT: &str = "#fafafa";

/// The variant table as worker request entries, in the table's order.
pub fn variant_specs() -> Vec<VariantSpec> {
    VARIANTS
        .iter()
        .map(|(id, size, background, box_fraction)| VariantSpec {
            id: (*id).to_string(),
            size: *size,
            background: background.map(str::to_string),
            box_fraction: *box_fraction,
        })
        .collect()
}

/// Largest raster accepted (each side) and the decoder's allocation budget: a decompression
/// bomb fails here, inside the worker's memory cap, and falls back to the Cloud logo.
const MAX_RASTER_SIDE: u32 = 8192;
const MAX_RASTER_ALLOC: u64 = 96 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum DrawError {
    #[error("the logo could not be decoded")]
    Decode,
    #[error("the icon could not be drawn")]
    Draw,
}

enum Decoded {
    Svg(Box<usvg::Tree>),
    Raster(Pixmap),
}

impl Decoded {
    fn size(&self) -> (f32, f32) {
        match self {
            Decoded::Svg(tree) => (tree.size().width(), tree.size().height()),
            Decoded::Raster(pixmap) => (pixmap.width() as f32, pixmap.height() as f32),
        }
    }
}

/// usvg with nothing outside the document: `<image>` references (files, URLs, even data URIs)
/// resolve to nothing.
fn svg_options() -> usvg::Options<'static> {
    usvg::Options {
        resources_dir: None,
        image_href_resolver: usvg::ImageHrefResolver {
            resolve_data: Box::new(|_, _, _| None),
            resolve_string: Box::new(|_, _| None),
        },
        ..usvg::Options::default()
    }
}

fn decode(data: &[u8], mime: &str, box_px: u32) -> Result<Decoded, DrawError> {
    if mime == "image/svg+xml" {
        // Text only: a gzip-compressed (svgz) document is not UTF-8 and never gets unpacked.
        let text = std::str::from_utf8(data).map_err(|_| DrawError::Decode)?;
        let tree = usvg::Tree::from_str(&sized_svg(text, box_px), &svg_options())
            .map_err(|_| DrawError::Decode)?;
        return Ok(Decoded::Svg(Box::new(tree)));
    }
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_RASTER_SIDE);
    limits.max_image_height = Some(MAX_RASTER_SIDE);
    limits.max_alloc = Some(MAX_RASTER_ALLOC);
    let mut reader = ImageReader::new(Cursor::new(data))
        .with_guessed_format()
        .map_err(|_| DrawError::Decode)?;
    reader.limits(limits);
    let image = reader.decode().map_err(|_| DrawError::Decode)?.into_rgba8();
    let (width, height) = image.dimensions();
    let mut pixels = image.into_raw();
    // tiny-skia works on premultiplied alpha.
    for pixel in pixels.chunks_exact_mut(4) {
        let alpha = u16::from(pixel[3]);
        if alpha < 255 {
            for channel in &mut pixel[..3] {
                *channel = ((u16::from(*channel) * alpha + 127) / 255) as u8;
            }
        }
    }
    let size = tiny_skia::IntSize::from_wh(width, height).ok_or(DrawError::Decode)?;
    let pixmap = Pixmap::from_vec(pixels, size).ok_or(DrawError::Decode)?;
    Ok(Decoded::Raster(pixmap))
}

fn parse_color(hex: &str) -> Option<tiny_skia::Color> {
    let hex = hex.strip_prefix('#')?;
    if hex.len() != 6 {
        return None;
    }
    let channel = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
    Some(tiny_skia::Color::from_rgba8(
        channel(0)?,
        channel(2)?,
        channel(4)?,
        255,
    ))
}

fn draw(image: &Decoded, variant: &VariantSpec, box_px: u32) -> Result<Vec<u8>, DrawError> {
    let size = variant.size;
    let mut canvas = Pixmap::new(size, size).ok_or(DrawError::Draw)?;
    if let Some(background) = &variant.background {
        canvas.fill(parse_color(background).ok_or(DrawError::Draw)?);
    }
    let (width, height) = image.size();
    if !(width > 0.0 && height > 0.0) {
        return Err(DrawError::Decode);
    }
    let box_px = box_px as f32;
    let scale = (box_px / width).min(box_px / height);
    // Centred, offsets not rounded: the same geometry as a browser canvas.
    let dx = (size as f32 - width * scale) / 2.0;
    let dy = (size as f32 - height * scale) / 2.0;
    let transform = Transform::from_row(scale, 0.0, 0.0, scale, dx, dy);
    match image {
        Decoded::Svg(tree) => resvg::render(tree, transform, &mut canvas.as_mut()),
        Decoded::Raster(pixmap) => canvas.draw_pixmap(
            0,
            0,
            pixmap.as_ref(),
            &PixmapPaint {
                quality: FilterQuality::Bicubic,
                ..PixmapPaint::default()
            },
            transform,
            None,
        ),
    }
    canvas.encode_png().map_err(|_| DrawError::Draw)
}

/// The icons of a run: each variant's id and PNG, in order.
pub type Icons = Vec<(String, Vec<u8>)>;

/// Every variant's PNG, in order, and whether the fallback (Cloud logo) was used. Once the logo
/// fails to decode for one variant, the later ones use the fallback directly; a fallback that
/// fails too fails the whole run.
pub fn render_all(
    source: &[u8],
    mime: &str,
    fallback_svg: &str,
    variants: &[VariantSpec],
) -> Result<(Icons, bool), DrawError> {
    let mut used_fallback = false;
    let mut icons = Vec::with_capacity(variants.len());
    for variant in variants {
        let box_px = (f64::from(variant.size) * variant.box_fraction).round() as u32;
        let logo = if used_fallback {
            None
        } else {
            decode(source, mime, box_px).ok().filter(|image| {
                let (w, h) = image.size();
                w > 0.0 && h > 0.0
            })
        };
        let png = match logo {
            Some(image) => draw(&image, variant, box_px),
            None => {
                used_fallback = true;
                let fallback = decode(fallback_svg.as_bytes(), "image/svg+xml", box_px)?;
                draw(&fallback, variant, box_px)
            }
        }?;
        icons.push((variant.id.clone(), png));
    }
    Ok((icons, used_fallback))
}
