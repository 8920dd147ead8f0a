//! A raster logo scaled into its box with the bicubic filter of tiny-skia's
//! `FilterQuality::Bicubic` (Mitchell–Netravali, B = C = 1/3), applied as two passes of four taps
//! (along the rows, then along the columns) instead of sixteen gathered taps per pixel. The source
//! is clamped at its edges (tiny-skia's `Pad`). The pixels drawn are those whose centres lie inside
//! the scaled image, edges rounded half up, as tiny-skia fills the image's rectangle without
//! anti-aliasing; a scale of exactly one copies the nearest pixel, as tiny-skia does. Each pixel is
//! clamped to valid premultiplied colour and blended source-over onto the canvas.

use resvg::tiny_skia::{Pixmap, PixmapMut};

/// The four source pixels one output pixel takes along one axis, and their weights.
#[derive(Debug, Clone, Copy)]
struct Taps {
    index: [usize; 4],
    weight: [f32; 4],
}

/// The weight of the two taps next to the sample point, `t` from the farther one's side.
fn near(t: f32) -> f32 {
    ((-21.0 / 18.0 * t + 27.0 / 18.0) * t + 9.0 / 18.0) * t + 1.0 / 18.0
}

/// The weight of the two outer taps.
fn far(t: f32) -> f32 {
    t * t * (7.0 / 18.0 * t - 6.0 / 18.0)
}

/// The taps of the output pixel whose centre is at `centre` on an axis where the image starts
/// at `offset` and is scaled by `scale`, over `len` source pixels; each weight times `gain`.
fn taps(centre: f32, offset: f32, scale: f32, len: usize, gain: f32) -> Taps {
    let t = (centre - offset) / scale + 0.5;
    let whole = t.floor();
    let f = t - whole;
    let last = len.saturating_sub(1) as i64;
    let index = |i: i64| (whole as i64 - 2 + i).clamp(0, last) as usize;
    Taps {
        index: [index(0), index(1), index(2), index(3)],
        weight: [far(1.0 - f), near(1.0 - f), near(f), far(f)].map(|w| w * gain),
    }
}

/// The source pixel nearest to the output pixel centred at `centre` (a scale of one).
fn nearest(centre: f32, offset: f32, len: usize) -> usize {
    ((centre - offset).floor().max(0.0) as usize).min(len.saturating_sub(1))
}

/// The output pixels `start..end` whose centres lie in `offset..offset + extent`, within `len`.
fn covered(offset: f32, extent: f32, len: usize) -> (usize, usize) {
    let edge = |v: f32| ((v + 0.5).floor().max(0.0) as usize).min(len);
    (edge(offset), edge(offset + extent))
}

/// Draws `image` onto `canvas` scaled by `scale_x` × `scale_y` with its top left corner at
/// (`dx`, `dy`), blended source-over.
pub fn draw(canvas: &mut PixmapMut, image: &Pixmap, scale_x: f32, scale_y: f32, dx: f32, dy: f32) {
    let (width, height) = (image.width() as usize, image.height() as usize);
    let (canvas_width, canvas_height) = (canvas.width() as usize, canvas.height() as usize);
    if !(scale_x > 0.0 && scale_y > 0.0) || width == 0 || height == 0 {
        return;
    }
    let (x0, x1) = covered(dx, width as f32 * scale_x, canvas_width);
    let (y0, y1) = covered(dy, height as f32 * scale_y, canvas_height);
    if x0 >= x1 || y0 >= y1 {
        return;
    }
    let source = image.data();
    let target = canvas.data_mut();
    let span = x1 - x0;
    if scale_x == 1.0 && scale_y == 1.0 {
        for y in y0..y1 {
            let row = nearest(y as f32 + 0.5, dy, height) * width;
            for x in x0..x1 {
                let from = (row + nearest(x as f32 + 0.5, dx, width)) * 4;
                let pixel = [0, 1, 2, 3].map(|c| f32::from(source[from + c]) / 255.0);
                blend(pixel, &mut target[(y * canvas_width + x) * 4..][..4]);
            }
        }
        return;
    }

    let columns: Vec<Taps> = (x0..x1)
        .map(|x| taps(x as f32 + 0.5, dx, scale_x, width, 1.0 / 255.0))
        .collect();
    let rows: Vec<Taps> = (y0..y1)
        .map(|y| taps(y as f32 + 0.5, dy, scale_y, height, 1.0))
        .collect();
    let first = rows.iter().map(|r| r.index[0]).min().unwrap_or(0);
    let last = rows.iter().map(|r| r.index[3]).max().unwrap_or(0);

    // Along the rows: every source row the columns' taps read, at the output's width.
    let mut across = vec![[0.0f32; 4]; (last - first + 1) * span];
    for (row, out) in source
        .chunks_exact(width * 4)
        .skip(first)
        .take(last - first + 1)
        .zip(across.chunks_exact_mut(span))
    {
        for (sum, column) in out.iter_mut().zip(&columns) {
            let mut acc = [0.0f32; 4];
            for (index, weight) in column.index.iter().zip(column.weight) {
                let pixel = &row[index * 4..index * 4 + 4];
                for (a, p) in acc.iter_mut().zip(pixel) {
                    *a += weight * f32::from(*p);
                }
            }
            *sum = acc;
        }
    }

    // Along the columns, then onto the canvas.
    for (y, taps) in (y0..y1).zip(&rows) {
        let sources = taps.index.map(|i| &across[(i - first) * span..][..span]);
        let out = &mut target[(y * canvas_width + x0) * 4..][..span * 4];
        for (x, pixel) in out.chunks_exact_mut(4).enumerate() {
            let mut acc = [0.0f32; 4];
            for (source, weight) in sources.iter().zip(taps.weight) {
                for (a, s) in acc.iter_mut().zip(source[x]) {
                    *a += weight * s;
                }
            }
            blend(acc, pixel);
        }
    }
}

/// Blends a premultiplied colour (channels in 0..=1, clamped to valid premultiplied colour) over
/// an 8-bit premultiplied pixel.
fn blend(colour: [f32; 4], pixel: &mut [u8]) {
    let alpha = colour[3].clamp(0.0, 1.0);
    let keep = 1.0 - alpha;
    for (c, channel) in pixel.iter_mut().enumerate() {
        let source = if c == 3 {
            alpha
        } else {
            colour[c].clamp(0.0, alpha)
        };
        let value = source + f32::from(*channel) / 255.0 * keep;
        *channel = (value.clamp(0.0, 1.0) * 255.0).round() as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resvg::tiny_skia::{FilterQuality, PixmapPaint, Transform};

    /// A premultiplied image from `colour(x, y)` (straight RGBA).
    fn image(width: u32, height: u32, colour: impl Fn(u32, u32) -> [u8; 4]) -> Pixmap {
        let mut pixmap = Pixmap::new(width, height).expect("pixmap");
        for (i, pixel) in pixmap.data_mut().chunks_exact_mut(4).enumerate() {
            let [r, g, b, a] = colour(i as u32 % width, i as u32 / width);
            let premultiply = |c: u8| ((u16::from(c) * u16::from(a) + 127) / 255) as u8;
            pixel.copy_from_slice(&[premultiply(r), premultiply(g), premultiply(b), a]);
        }
        pixmap
    }

    /// The canvas drawn by this module and by tiny-skia's bicubic `draw_pixmap`.
    fn both(
        image: &Pixmap,
        canvas: (u32, u32),
        background: [u8; 4],
        placement: (f32, f32, f32, f32),
    ) -> (Pixmap, Pixmap) {
        let (sx, sy, dx, dy) = placement;
        let mut blank = Pixmap::new(canvas.0, canvas.1).expect("canvas");
        for pixel in blank.data_mut().chunks_exact_mut(4) {
            pixel.copy_from_slice(&background);
        }
        let mut ours = blank.clone();
        draw(&mut ours.as_mut(), image, sx, sy, dx, dy);
        let mut theirs = blank;
        theirs.draw_pixmap(
            0,
            0,
            image.as_ref(),
            &PixmapPaint {
                quality: FilterQuality::Bicubic,
                ..PixmapPaint::default()
            },
            Transform::from_row(sx, 0.0, 0.0, sy, dx, dy),
            None,
        );
        (ours, theirs)
    }

    fn largest_difference(a: &Pixmap, b: &Pixmap) -> u8 {
        a.data()
            .iter()
            .zip(b.data())
            .map(|(x, y)| x.abs_diff(*y))
            .max()
            .unwrap_or(0)
    }

    /// An opaque image with detail at every pixel: the taps, their weights and the overshoot
    /// clamp as tiny-skia's, at the icons' scales and at odd offsets and sizes.
    #[test]
    fn opaque_images_draw_as_tiny_skia_draws_them() {
        let noise = image(97, 61, |x, y| {
            let v = (x * 7919 + y * 104_729) ^ (x * y * 31);
            [
                (v % 251) as u8,
                (v / 7 % 253) as u8,
                (v / 13 % 255) as u8,
                255,
            ]
        });
        for placement in [
            (0.84, 0.84, 15.5, 15.5),
            (0.56, 0.56, 3.25, 7.75),
            (1.7, 1.3, -4.6, 2.2),
            (0.5, 0.9, 10.0, 0.0),
            (0.3333, 0.3333, 0.4999, 1.5001),
        ] {
            let (ours, theirs) = both(&noise, (120, 90), [250, 250, 250, 255], placement);
            assert!(
                largest_difference(&ours, &theirs) <= 1,
                "{placement:?}: differs by {}",
                largest_difference(&ours, &theirs)
            );
        }
    }

    /// A translucent image onto a transparent canvas: blended source-over as tiny-skia blends.
    #[test]
    fn translucent_images_blend_as_tiny_skia_blends_them() {
        let smooth = image(64, 48, |x, y| {
            [(x * 4) as u8, (y * 5) as u8, 128, (60 + x * 2 + y) as u8]
        });
        for background in [[0, 0, 0, 0], [40, 20, 10, 80]] {
            for placement in [(0.84, 0.84, 5.5, 2.5), (2.5, 2.5, -3.0, -1.0)] {
                let (ours, theirs) = both(&smooth, (100, 80), background, placement);
                assert!(largest_difference(&ours, &theirs) <= 1, "{placement:?}");
            }
        }
    }

    /// At a scale of one tiny-skia copies the nearest pixel; so does this module.
    #[test]
    fn a_scale_of_one_copies_pixels() {
        let noise = image(20, 10, |x, y| [(x * 12) as u8, (y * 25) as u8, 7, 255]);
        for placement in [(1.0, 1.0, 3.0, 4.0), (1.0, 1.0, 2.6, 1.4)] {
            let (ours, theirs) = both(&noise, (30, 20), [0, 0, 0, 0], placement);
            assert_eq!(ours.data(), theirs.data(), "{placement:?}");
        }
    }

    /// Hard edges overshoot; what is drawn stays valid premultiplied colour (each channel at
    /// most its alpha), which tiny-skia does not keep: next to an edge from opaque black to
    /// half-transparent white, the colour overshoots while the alpha undershoots.
    #[test]
    fn overshoot_stays_valid_premultiplied_colour() {
        let edge = image(16, 16, |x, _| {
            if x < 8 {
                [0, 0, 0, 255]
            } else {
                [255, 255, 255, 128]
            }
        });
        let mut canvas = Pixmap::new(40, 40).expect("canvas");
        draw(&mut canvas.as_mut(), &edge, 2.3, 2.3, 1.0, 1.0);
        assert!(
            canvas
                .data()
                .chunks_exact(4)
                .all(|p| p[..3].iter().all(|c| *c <= p[3]))
        );
        let pixel = |x: usize, y: usize| &canvas.data()[(y * 40 + x) * 4..][..4];
        assert_eq!(pixel(5, 20), [0, 0, 0, 255]);
        assert_eq!(pixel(35, 20), [128, 128, 128, 128]);
        // Where tiny-skia's colour passes its alpha, ours stops at the alpha.
        let (mut ours, theirs) = both(&edge, (40, 40), [0, 0, 0, 0], (2.3, 2.3, 1.0, 1.0));
        let overshoot = theirs
            .data()
            .chunks_exact(4)
            .position(|p| p[0] > p[3])
            .expect("tiny-skia keeps a colour above its alpha");
        let pixel = &ours.data_mut()[overshoot * 4..][..4];
        assert!(pixel[..3].iter().all(|c| *c == pixel[3]), "{pixel:?}");
    }

    /// Nothing is drawn outside the canvas, nor for an image scaled to nothing.
    #[test]
    fn drawing_stays_inside_the_canvas() {
        let noise = image(50, 50, |x, y| [x as u8, y as u8, 0, 255]);
        let (ours, theirs) = both(&noise, (30, 30), [0, 0, 0, 0], (1.5, 1.5, -20.0, 10.0));
        assert!(largest_difference(&ours, &theirs) <= 1);
        let mut canvas = Pixmap::new(10, 10).expect("canvas");
        draw(&mut canvas.as_mut(), &noise, 0.0, 1.0, 0.0, 0.0);
        draw(&mut canvas.as_mut(), &noise, 1.0, 1.0, 20.0, 0.0);
        assert!(canvas.data().iter().all(|c| *c == 0));
    }
}
