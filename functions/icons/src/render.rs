//! Drawing the four icons from a logo: SVG parsed by usvg (locked down: no file or network
//! `href`, no compressed SVG, no fonts) and drawn by [`crate::vector`], rasters through `image`
//! with decode limits, a tiny-skia canvas, an optional opaque background, high-quality scaling
//! into a centred box ([`crate::scale`], from the nearest of the raster's halvings, each made
//! once per run), PNG out.

use std::io::Cursor;

use image::{ImageReader, Limits};
use resvg::tiny_skia::{self, Pixmap, Transform};
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

impl VariantSpec {
    /// The side of the centred square the logo fits into, in whole pixels.
    pub fn box_px(&self) -> u32 {
        (f64::from(self.size) * self.box_fraction).round() as u32
    }

    /// The transform that fits a drawing of `width` × `height` into the box, centred, offsets
    /// not rounded: the same geometry as a browser canvas.
    pub fn placement(&self, width: f32, height: f32) -> Transform {
        let box_px = self.box_px() as f32;
        let scale = (box_px / width).min(box_px / height);
        let dx = (self.size as f32 - width * scale) / 2.0;
        let dy = (self.size as f32 - height * scale) / 2.0;
        Transform::from_row(scale, 0.0, 0.0, scale, dx, dy)
    }
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
    Raster(Levels),
}

impl Decoded {
    fn size(&self) -> (f32, f32) {
        match self {
            Decoded::Svg(tree) => (tree.size().width(), tree.size().height()),
            Decoded::Raster(levels) => {
                let image = levels.source();
                (image.width() as f32, image.height() as f32)
            }
        }
    }
}

/// A raster and the halvings of it made so far (a mipmap), shared by the sizes of one run.
struct Levels {
    /// The decoded raster first, then each level half the one before it.
    levels: Vec<Pixmap>,
}

impl Levels {
    fn new(source: Pixmap) -> Levels {
        Levels {
            levels: vec![source],
        }
    }

    fn source(&self) -> &Pixmap {
        &self.levels[0]
    }

    /// The level to scale to `width` × `height`: the smallest whose halving would be smaller (the
    /// raster itself when it is no larger than twice the size), halving further as needed. A
    /// large downscale first halves the image with a box filter (as browsers do), so the bicubic
    /// step samples every source pixel.
    fn for_size(&mut self, width: f32, height: f32) -> &Pixmap {
        let mut index = 0;
        loop {
            let level = &self.levels[index];
            if (level.width() as f32) / 2.0 < width || (level.height() as f32) / 2.0 < height {
                break;
            }
            if index + 1 == self.levels.len() {
                match halve(level) {
                    Some(half) => self.levels.push(half),
                    None => break,
                }
            }
            index += 1;
        }
        &self.levels[index]
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
    Ok(Decoded::Raster(Levels::new(pixmap)))
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

fn draw(
    image: &mut Decoded,
    variant: &VariantSpec,
    compression: png::Compression,
) -> Result<Vec<u8>, DrawError> {
    let size = variant.size;
    let mut canvas = Pixmap::new(size, size).ok_or(DrawError::Draw)?;
    if let Some(background) = &variant.background {
        canvas.fill(parse_color(background).ok_or(DrawError::Draw)?);
    }
    let (width, height) = image.size();
    if !(width > 0.0 && height > 0.0) {
        return Err(DrawError::Decode);
    }
    let transform = variant.placement(width, height);
    let (scale, dx, dy) = (transform.sx, transform.tx, transform.ty);
    match image {
        Decoded::Svg(tree) => crate::vector::render(tree, transform, &mut canvas.as_mut()),
        Decoded::Raster(levels) => {
            let (target_w, target_h) = (width * scale, height * scale);
            let level = levels.for_size(target_w, target_h);
            crate::scale::draw(
                &mut canvas.as_mut(),
                level,
                target_w / level.width() as f32,
                target_h / level.height() as f32,
                dx,
                dy,
            );
        }
    }
    encode_png(canvas, compression)
}

/// Half the width and height (rounded down), each pixel the mean of a 2×2 block. Premultiplied
/// colour stays at most its alpha, since the mean is monotonic.
fn halve(source: &Pixmap) -> Option<Pixmap> {
    let (width, height) = (source.width() / 2, source.height() / 2);
    let mut half = Pixmap::new(width, height)?;
    let stride = source.width() as usize * 4;
    let from = source.data();
    for (y, row) in half
        .data_mut()
        .chunks_exact_mut(width as usize * 4)
        .enumerate()
    {
        let top = &from[2 * y * stride..][..stride];
        let bottom = &from[(2 * y + 1) * stride..][..stride];
        for (x, pixel) in row.chunks_exact_mut(4).enumerate() {
            for (c, channel) in pixel.iter_mut().enumerate() {
                let i = 8 * x + c;
                let sum = u16::from(top[i])
                    + u16::from(top[i + 4])
                    + u16::from(bottom[i])
                    + u16::from(bottom[i + 4]);
                *channel = ((sum + 2) / 4) as u8;
            }
        }
    }
    Some(half)
}

pub use png::Compression as PngCompression;

/// The icons' PNG compression: the fast DEFLATE of the `png` crate (adaptive row filters),
/// several times quicker than the default level at a few percent more bytes, and icons are drawn
/// while a request waits.
pub const ICON_COMPRESSION: png::Compression = png::Compression::Fast;

fn encode_png(canvas: Pixmap, compression: png::Compression) -> Result<Vec<u8>, DrawError> {
    let (width, height) = (canvas.width(), canvas.height());
    let rgba = canvas.take_demultiplied();
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, width, height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(compression);
    let mut writer = encoder.write_header().map_err(|_| DrawError::Draw)?;
    writer
        .write_image_data(&rgba)
        .map_err(|_| DrawError::Draw)?;
    writer.finish().map_err(|_| DrawError::Draw)?;
    Ok(png)
}

/// A decoded logo with a drawable size.
fn usable(image: &Decoded) -> bool {
    let (width, height) = image.size();
    width > 0.0 && height > 0.0
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
    render_all_with(source, mime, fallback_svg, variants, ICON_COMPRESSION)
}

/// [`render_all`] at another PNG compression (to compare encoders at equal compression).
pub fn render_all_with(
    source: &[u8],
    mime: &str,
    fallback_svg: &str,
    variants: &[VariantSpec],
    compression: png::Compression,
) -> Result<(Icons, bool), DrawError> {
    // The logo decodes once per run. An SVG is parsed at the largest box and each size renders
    // the same vector tree scaled to its own box, so every size stays sharp.
    let largest_box = variants.iter().map(VariantSpec::box_px).max().unwrap_or(1);
    let mut used_fallback = false;
    let mut decoded: Option<Option<Decoded>> = None;
    let mut icons = Vec::with_capacity(variants.len());
    for variant in variants {
        let logo = if used_fallback {
            None
        } else {
            decoded
                .get_or_insert_with(|| decode(source, mime, largest_box).ok().filter(usable))
                .as_mut()
        };
        let png = match logo {
            Some(image) => draw(image, variant, compression),
            None => {
                used_fallback = true;
                let mut fallback =
                    decode(fallback_svg.as_bytes(), "image/svg+xml", variant.box_px())?;
                draw(&mut fallback, variant, compression)
            }
        }?;
        icons.push((variant.id.clone(), png));
    }
    Ok((icons, used_fallback))
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageFormat, Rgba, RgbaImage};

    const FALLBACK: &str = k2b_core::branding::CLOUD_LOGO_SVG;

    /// A wide opaque image: left half red, right half blue.
    fn two_colour(width: u32, height: u32, format: ImageFormat) -> Vec<u8> {
        let image = RgbaImage::from_fn(width, height, |x, _| {
            if x < width / 2 {
                Rgba([255, 0, 0, 255])
            } else {
                Rgba([0, 0, 255, 255])
            }
        });
        let mut bytes = Cursor::new(Vec::new());
        match format {
            ImageFormat::Jpeg => image::DynamicImage::ImageRgba8(image)
                .into_rgb8()
                .write_to(&mut bytes, format),
            _ => image.write_to(&mut bytes, format),
        }
        .expect("encode");
        bytes.into_inner()
    }

    fn pixels(png: &[u8]) -> RgbaImage {
        image::load_from_memory_with_format(png, ImageFormat::Png)
            .expect("a PNG")
            .into_rgba8()
    }

    fn close(actual: &Rgba<u8>, expected: [u8; 4], tolerance: u8) -> bool {
        actual
            .0
            .iter()
            .zip(expected)
            .all(|(a, e)| a.abs_diff(e) <= tolerance)
    }

    #[test]
    fn a_large_wide_raster_is_fitted_centred_with_its_aspect() {
        let logo = two_colour(2000, 1000, ImageFormat::Png);
        let (icons, fallback) =
            render_all(&logo, "image/png", FALLBACK, &variant_specs()).expect("drawn");
        assert!(!fallback);
        let sizes: Vec<u32> = icons.iter().map(|(_, png)| pixels(png).width()).collect();
        assert_eq!(sizes, [192, 512, 512, 180]);

        // 192: box 161 → the logo is 161 × 80.5, rows 55.75..136.25.
        let any = pixels(&icons[0].1);
        assert_eq!(any.get_pixel(0, 0).0, [0, 0, 0, 0]);
        assert_eq!(any.get_pixel(96, 50).0, [0, 0, 0, 0], "above the logo");
        assert_eq!(any.get_pixel(96, 140).0, [0, 0, 0, 0], "below the logo");
        assert_eq!(any.get_pixel(60, 96).0, [255, 0, 0, 255]);
        assert_eq!(any.get_pixel(132, 96).0, [0, 0, 255, 255]);

        // Maskable: opaque #fafafa around the logo.
        let maskable = pixels(&icons[2].1);
        assert_eq!(maskable.get_pixel(0, 0).0, [0xfa, 0xfa, 0xfa, 255]);
        assert_eq!(maskable.get_pixel(256, 150).0, [0xfa, 0xfa, 0xfa, 255]);
        assert_eq!(maskable.get_pixel(180, 256).0, [255, 0, 0, 255]);
        assert_eq!(maskable.get_pixel(330, 256).0, [0, 0, 255, 255]);
    }

    #[test]
    fn a_jpeg_logo_draws_every_variant() {
        let logo = two_colour(1200, 600, ImageFormat::Jpeg);
        let (icons, fallback) =
            render_all(&logo, "image/jpeg", FALLBACK, &variant_specs()).expect("drawn");
        assert!(!fallback);
        let apple = pixels(&icons[3].1);
        assert_eq!(apple.get_pixel(0, 0).0, [0xfa, 0xfa, 0xfa, 255]);
        assert!(close(apple.get_pixel(60, 90), [255, 0, 0, 255], 8));
        assert!(close(apple.get_pixel(120, 90), [0, 0, 255, 255], 8));
    }

    #[test]
    fn undecodable_bytes_fall_back_for_every_variant() {
        let (icons, fallback) =
            render_all(b"not an image", "image/png", FALLBACK, &variant_specs()).expect("drawn");
        assert!(fallback);
        assert_eq!(icons.len(), 4);
        // The Cloud logo's centre is opaque.
        assert_eq!(pixels(&icons[1].1).get_pixel(256, 256).0[3], 255);
    }

    #[test]
    fn halving_averages_two_by_two_blocks_and_drops_an_odd_edge() {
        let mut source = Pixmap::new(5, 3).expect("pixmap");
        // Premultiplied: (r, g, b, a) with colour ≤ alpha.
        let values: [[u8; 4]; 4] = [
            [255, 0, 0, 255],
            [0, 0, 0, 0],
            [10, 20, 30, 40],
            [4, 4, 4, 4],
        ];
        for (i, pixel) in source.data_mut().chunks_exact_mut(4).enumerate() {
            let (x, y) = (i % 5, i / 5);
            if x < 2 && y < 2 {
                pixel.copy_from_slice(&values[y * 2 + x]);
            } else {
                pixel.copy_from_slice(&[9, 9, 9, 9]);
            }
        }
        let half = halve(&source).expect("half");
        assert_eq!((half.width(), half.height()), (2, 1));
        // (255+0+10+4+2)/4 = 67, (0+0+20+4+2)/4 = 6, (0+0+30+4+2)/4 = 9, (255+0+40+4+2)/4 = 75
        assert_eq!(&half.data()[..4], &[67, 6, 9, 75]);
        assert_eq!(&half.data()[4..], &[9, 9, 9, 9]);
        assert!(
            half.data()
                .chunks_exact(4)
                .all(|p| p[..3].iter().all(|c| *c <= p[3]))
        );
    }

    #[test]
    fn encoded_icons_round_trip_exactly() {
        let mut canvas = Pixmap::new(3, 1).expect("pixmap");
        canvas.fill(tiny_skia::Color::from_rgba8(250, 250, 250, 255));
        let png = encode_png(canvas, ICON_COMPRESSION).expect("png");
        assert!(pixels(&png).pixels().all(|p| p.0 == [250, 250, 250, 255]));
    }
}
