//! Drawing an SVG tree with exact-area anti-aliasing. Each filled outline (a fill, or a stroke
//! turned into its outline) is flattened to line segments in device space; every segment adds
//! the signed area it covers to an accumulation buffer the size of the outline's bounding box,
//! and a running sum along each row gives every pixel's winding coverage. A solid colour is
//! blended into each covered pixel during that sum (with the arithmetic of tiny-skia's 8-bit
//! pipeline); any other paint gets the coverage as a mask and covers the box through it in one
//! pipeline run per row, instead of one per anti-aliased span (for outlines of up to 64 × 64
//! pixels: a larger one, a ring say, would shade much empty space, and tiny-skia fills it).
//!
//! A tree with anything this does not draw the same way (a group drawn as a layer for its
//! opacity, clip, mask, filter or blend mode; an image; text; a pattern paint) is drawn by resvg
//! whole. Even-odd fills and shapes drawn without anti-aliasing are drawn by tiny-skia, as resvg
//! draws them. A stroke of any width is filled as its outline, so a stroke thinner than a pixel
//! covers the area it has (tiny-skia draws it as a one-pixel line of lighter paint).

use resvg::tiny_skia::{
    self, BlendMode, ColorSpace, FillRule, Mask, Paint, Path, PathSegment, PathStroker, PixmapMut,
    Point, Rect, Shader, Transform,
};
use resvg::usvg;

/// The largest sag, in pixels, of the chords that replace a curve (before the chords move outward
/// by two thirds of it: at most two thirds of this from the curve).
const FLATNESS: f32 = 0.15;
/// Areas are summed in fixed point with this many fraction bits: integer sums along a row. The
/// sums wrap rather than overflow (exact up to 32,767 overlapping windings).
const AREA_BITS: u32 = 16;
const ONE: u32 = 1 << AREA_BITS;
/// A paint other than a solid colour is shaded over the whole box of an outline through the
/// coverage mask, the empty parts too; an outline with a larger box (in pixels, around its points
/// and control points, within the canvas) is left to tiny-skia, which shades only the spans it
/// covers.
const MAX_SHADED_BOX: usize = 64 * 64;
/// A curve becomes at most this many segments.
const MAX_CURVE_SEGMENTS: f32 = 64.0;

/// Draws `tree` onto `pixmap` with `transform` as the root transform, as `resvg::render` does.
pub fn render(tree: &usvg::Tree, transform: Transform, pixmap: &mut PixmapMut) {
    if !drawable(tree.root()) {
        resvg::render(tree, transform, pixmap);
        return;
    }
    let Some(mut coverage) = Coverage::new(pixmap.width(), pixmap.height()) else {
        return;
    };
    draw_group(tree.root(), transform, &mut coverage, pixmap);
}

/// Whether every node under `group` is drawn here.
fn drawable(group: &usvg::Group) -> bool {
    group.children().iter().all(|node| match node {
        usvg::Node::Group(group) => !group.should_isolate() && drawable(group),
        usvg::Node::Path(path) => {
            let paint_drawable = |paint: &usvg::Paint| !matches!(paint, usvg::Paint::Pattern(_));
            path.fill().is_none_or(|fill| paint_drawable(fill.paint()))
                && path
                    .stroke()
                    .is_none_or(|stroke| paint_drawable(stroke.paint()))
        }
        usvg::Node::Image(_) | usvg::Node::Text(_) => false,
    })
}

fn draw_group(
    group: &usvg::Group,
    transform: Transform,
    coverage: &mut Coverage,
    pixmap: &mut PixmapMut,
) {
    for node in group.children() {
        match node {
            usvg::Node::Group(child) => {
                draw_group(
                    child,
                    transform.pre_concat(child.transform()),
                    coverage,
                    pixmap,
                );
            }
            usvg::Node::Path(path) if path.is_visible() => {
                if path.paint_order() == usvg::PaintOrder::FillAndStroke {
                    fill(path, transform, coverage, pixmap);
                    stroke(path, transform, coverage, pixmap);
                } else {
                    stroke(path, transform, coverage, pixmap);
                    fill(path, transform, coverage, pixmap);
                }
            }
            _ => {}
        }
    }
}

/// The paint of a fill or stroke, as resvg makes it; `None` for a gradient tiny-skia refuses
/// (which resvg leaves undrawn too) or a pattern.
fn paint_of(paint: &usvg::Paint, opacity: usvg::Opacity, anti_alias: bool) -> Option<Paint<'_>> {
    let mut out = Paint {
        anti_alias,
        ..Paint::default()
    };
    match paint {
        usvg::Paint::Color(c) => out.set_color_rgba8(c.red, c.green, c.blue, opacity.to_u8()),
        usvg::Paint::LinearGradient(lg) => {
            out.shader = tiny_skia::LinearGradient::new(
                (lg.x1(), lg.y1()).into(),
                (lg.x2(), lg.y2()).into(),
                stops(lg, opacity),
                spread(lg),
                lg.transform(),
            )?;
        }
        usvg::Paint::RadialGradient(rg) => {
            out.shader = tiny_skia::RadialGradient::new(
                (rg.fx(), rg.fy()).into(),
                rg.fr().get(),
                (rg.cx(), rg.cy()).into(),
                rg.r().get(),
                stops(rg, opacity),
                spread(rg),
                rg.transform(),
            )?;
        }
        usvg::Paint::Pattern(_) => return None,
    }
    Some(out)
}

fn spread(gradient: &usvg::BaseGradient) -> tiny_skia::SpreadMode {
    match gradient.spread_method() {
        usvg::SpreadMethod::Pad => tiny_skia::SpreadMode::Pad,
        usvg::SpreadMethod::Reflect => tiny_skia::SpreadMode::Reflect,
        usvg::SpreadMethod::Repeat => tiny_skia::SpreadMode::Repeat,
    }
}

fn stops(gradient: &usvg::BaseGradient, opacity: usvg::Opacity) -> Vec<tiny_skia::GradientStop> {
    gradient
        .stops()
        .iter()
        .map(|stop| {
            let color = stop.color();
            tiny_skia::GradientStop::new(
                stop.offset().get(),
                tiny_skia::Color::from_rgba8(
                    color.red,
                    color.green,
                    color.blue,
                    (stop.opacity() * opacity).to_u8(),
                ),
            )
        })
        .collect()
}

fn fill(path: &usvg::Path, transform: Transform, coverage: &mut Coverage, pixmap: &mut PixmapMut) {
    let Some(fill) = path.fill() else {
        return;
    };
    let bounds = path.data().bounds();
    // Horizontal and vertical lines enclose nothing.
    if bounds.width() == 0.0 || bounds.height() == 0.0 {
        return;
    }
    let anti_alias = path.rendering_mode().use_shape_antialiasing();
    let Some(paint) = paint_of(fill.paint(), fill.opacity(), anti_alias) else {
        return;
    };
    match fill.rule() {
        usvg::FillRule::NonZero if anti_alias => {
            coverage.fill(path.data(), transform, paint, pixmap);
        }
        usvg::FillRule::NonZero => {
            pixmap.fill_path(path.data(), &paint, FillRule::Winding, transform, None);
        }
        usvg::FillRule::EvenOdd => {
            pixmap.fill_path(path.data(), &paint, FillRule::EvenOdd, transform, None);
        }
    }
}

fn stroke(
    path: &usvg::Path,
    transform: Transform,
    coverage: &mut Coverage,
    pixmap: &mut PixmapMut,
) {
    let Some(stroke) = path.stroke() else {
        return;
    };
    let anti_alias = path.rendering_mode().use_shape_antialiasing();
    let Some(paint) = paint_of(stroke.paint(), stroke.opacity(), anti_alias) else {
        return;
    };
    let stroke = stroke.to_tiny_skia();
    if !anti_alias {
        pixmap.stroke_path(path.data(), &paint, &stroke, transform, None);
        return;
    }
    let res_scale = PathStroker::compute_resolution_scale(&transform);
    let dashed;
    let data = match &stroke.dash {
        Some(dash) => match path.data().dash(dash, res_scale) {
            Some(path) => {
                dashed = path;
                &dashed
            }
            None => return,
        },
        None => path.data(),
    };
    if let Some(outline) = data.stroke(&stroke, res_scale) {
        coverage.fill(&outline, transform, paint, pixmap);
    }
}

/// The canvas-sized coverage mask, the segments of the outline being filled and its
/// accumulation buffer, kept across outlines. A fill writes every mask byte of its box before it
/// draws through the mask, and the drawing reads no byte outside the box.
struct Coverage {
    mask: Mask,
    width: u32,
    height: u32,
    lines: Vec<(Point, Point)>,
    area: Vec<i32>,
}

impl Coverage {
    fn new(width: u32, height: u32) -> Option<Coverage> {
        Some(Coverage {
            mask: Mask::new(width, height)?,
            width,
            height,
            lines: Vec::new(),
            area: Vec::new(),
        })
    }

    /// The area, in pixels, of the part within the canvas of the box around `outline`'s points
    /// and control points under `transform` (infinite when it cannot be transformed).
    fn visible_box_area(&self, outline: &Path, transform: Transform) -> f32 {
        let Some(bounds) = outline.bounds().transform(transform) else {
            return f32::INFINITY;
        };
        let width = bounds.right().min(self.width as f32) - bounds.left().max(0.0);
        let height = bounds.bottom().min(self.height as f32) - bounds.top().max(0.0);
        width.max(0.0) * height.max(0.0)
    }

    /// Fills `outline` (non-zero winding) under `transform` with `paint`.
    fn fill(
        &mut self,
        outline: &Path,
        transform: Transform,
        mut paint: Paint,
        pixmap: &mut PixmapMut,
    ) {
        let source = solid_source_over(&paint);
        if source.is_none() && self.visible_box_area(outline, transform) > MAX_SHADED_BOX as f32 {
            pixmap.fill_path(outline, &paint, FillRule::Winding, transform, None);
            return;
        }
        self.lines.clear();
        flatten(outline, transform, &mut self.lines);
        let (mut left, mut top, mut right, mut bottom) = (f32::MAX, f32::MAX, f32::MIN, f32::MIN);
        for (p0, p1) in &self.lines {
            for p in [p0, p1] {
                left = left.min(p.x);
                right = right.max(p.x);
                top = top.min(p.y);
                bottom = bottom.max(p.y);
            }
        }
        if !(left.is_finite() && top.is_finite() && right.is_finite() && bottom.is_finite()) {
            return;
        }
        // The box of whole pixels the outline touches, within the canvas.
        let x0 = left.floor().max(0.0);
        let y0 = top.floor().max(0.0);
        let x1 = right.ceil().min(self.width as f32);
        let y1 = bottom.ceil().min(self.height as f32);
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        let (box_x, box_y) = (x0 as usize, y0 as usize);
        let (box_w, box_h) = ((x1 - x0) as usize, (y1 - y0) as usize);
        // Two spare columns: a segment on the box's right edge adds area just past it.
        let stride = box_w + 2;
        // Every cell is zero between fills: the running sums below read each one back to zero.
        if self.area.len() < stride * box_h {
            self.area.resize(stride * box_h, 0);
        }
        let mut area = Area {
            cells: &mut self.area[..stride * box_h],
            stride,
            width: box_w as f32,
            height: box_h as f32,
        };
        for (p0, p1) in &self.lines {
            let p0 = Point::from_xy(p0.x - x0, p0.y - y0);
            let p1 = Point::from_xy(p1.x - x0, p1.y - y0);
            area.clipped_line(p0, p1);
        }

        let canvas_width = self.width as usize;
        let rows = self.area[..stride * box_h].chunks_exact_mut(stride);
        if let Some(source) = source {
            // A solid colour blends right here, pixel by pixel where there is coverage, with
            // the arithmetic of tiny-skia's pipeline for a colour through a mask.
            let data = pixmap.data_mut();
            for (row, cells) in rows.enumerate() {
                let start = ((box_y + row) * canvas_width + box_x) * 4;
                let pixels = data[start..start + box_w * 4].chunks_exact_mut(4);
                for (pixel, alpha) in pixels.zip(row_coverage(cells, box_w)) {
                    if alpha != 0 {
                        blend(pixel, source, alpha);
                    }
                }
            }
            return;
        }

        let mask = self.mask.data_mut();
        for (row, cells) in rows.enumerate() {
            let start = (box_y + row) * canvas_width + box_x;
            for (alpha, coverage) in mask[start..start + box_w]
                .iter_mut()
                .zip(row_coverage(cells, box_w))
            {
                *alpha = coverage;
            }
        }

        paint.shader.transform(transform);
        paint.anti_alias = false;
        if let Some(rect) = Rect::from_ltrb(x0, y0, x1, y1) {
            pixmap.fill_rect(rect, &paint, Transform::identity(), Some(&self.mask));
        }
    }
}

/// The coverage of each pixel of a box row (`box_w` cells and two spare ones) from the running
/// sum of its cells, which it reads back to zero.
fn row_coverage(cells: &mut [i32], box_w: usize) -> impl Iterator<Item = u8> + '_ {
    let (cells, spare) = cells.split_at_mut(box_w);
    spare.fill(0);
    let mut winding = 0i32;
    cells.iter_mut().map(move |cell| {
        winding = winding.wrapping_add(std::mem::take(cell));
        coverage_of(winding)
    })
}

/// A pixel's coverage (0 to 255) from its winding area in fixed point.
fn coverage_of(winding: i32) -> u8 {
    ((winding.unsigned_abs().min(ONE) * 255 + ONE / 2) >> AREA_BITS) as u8
}

/// The premultiplied colour (0 to 255 per channel, rounded as tiny-skia rounds it) of a paint
/// that is one colour drawn over what is there, in the default colour space.
fn solid_source_over(paint: &Paint) -> Option<[u16; 4]> {
    let Shader::SolidColor(color) = &paint.shader else {
        return None;
    };
    if paint.blend_mode != BlendMode::SourceOver || paint.colorspace != ColorSpace::Linear {
        return None;
    }
    let color = color.premultiply();
    let channel = |value: f32| (value * 255.0 + 0.5) as u16;
    Some([
        channel(color.red()),
        channel(color.green()),
        channel(color.blue()),
        channel(color.alpha()),
    ])
}

/// tiny-skia's division by 255 in its 8-bit pipeline.
fn div255(value: u16) -> u16 {
    (value + 255) >> 8
}

/// `source` scaled by `coverage`, over the premultiplied `pixel`.
fn blend(pixel: &mut [u8], source: [u16; 4], coverage: u8) {
    let coverage = u16::from(coverage);
    let scaled = source.map(|channel| div255(channel * coverage));
    let keep = 255 - scaled[3];
    for (channel, scaled) in pixel.iter_mut().zip(scaled) {
        *channel = (scaled + div255(u16::from(*channel) * keep)) as u8;
    }
}

/// An outline's segments in device space, each subpath closed. A curve becomes chords between
/// points at even steps of its parameter, each inner point moved outward by two thirds of the
/// chords' sag (the second derivative times step² / 12): a chord cuts off two thirds of its sag
/// times its length, so the moved chords enclose the curve's area, the error split between
/// inside and outside instead of all inside.
fn flatten(path: &Path, transform: Transform, lines: &mut Vec<(Point, Point)>) {
    let map = |mut p: Point| {
        transform.map_point(&mut p);
        p
    };
    let mut start = Point::zero();
    let mut last = Point::zero();
    for segment in path.segments() {
        match segment {
            PathSegment::MoveTo(p) => {
                if last != start {
                    lines.push((last, start));
                }
                start = map(p);
                last = start;
            }
            PathSegment::LineTo(p) => {
                let p = map(p);
                lines.push((last, p));
                last = p;
            }
            PathSegment::QuadTo(c, p) => {
                let (c, p) = (map(c), map(p));
                let p0 = last;
                // The second derivative is 2·dd everywhere.
                let dd = weighted([(p0, 1.0), (c, -2.0), (p, 1.0)]);
                let n = segments_for(dd.length() / 4.0);
                let inward = weighted([(dd, 1.0 / (6 * n * n) as f32)]);
                for i in 1..=n {
                    let t = i as f32 / n as f32;
                    let u = 1.0 - t;
                    let q = if i == n {
                        p
                    } else {
                        weighted([(p0, u * u), (c, 2.0 * u * t), (p, t * t), (inward, -1.0)])
                    };
                    lines.push((last, q));
                    last = q;
                }
            }
            PathSegment::CubicTo(c1, c2, p) => {
                let (c1, c2, p) = (map(c1), map(c2), map(p));
                let p0 = last;
                // The second derivative is 6·((1 - t)·dd0 + t·dd1).
                let dd0 = weighted([(p0, 1.0), (c1, -2.0), (c2, 1.0)]);
                let dd1 = weighted([(c1, 1.0), (c2, -2.0), (p, 1.0)]);
                let n = segments_for(dd0.length().max(dd1.length()) * 0.75);
                let scale = 1.0 / (2 * n * n) as f32;
                for i in 1..=n {
                    let t = i as f32 / n as f32;
                    let u = 1.0 - t;
                    let q = if i == n {
                        p
                    } else {
                        weighted([
                            (p0, u * u * u),
                            (c1, 3.0 * u * u * t),
                            (c2, 3.0 * u * t * t),
                            (p, t * t * t),
                            (dd0, -u * scale),
                            (dd1, -t * scale),
                        ])
                    };
                    lines.push((last, q));
                    last = q;
                }
            }
            PathSegment::Close => {
                if last != start {
                    lines.push((last, start));
                }
                last = start;
            }
        }
    }
    if last != start {
        lines.push((last, start));
    }
}

/// The sum of points scaled by weights.
fn weighted<const N: usize>(terms: [(Point, f32); N]) -> Point {
    let (mut x, mut y) = (0.0, 0.0);
    for (point, weight) in terms {
        x += point.x * weight;
        y += point.y * weight;
    }
    Point::from_xy(x, y)
}

/// Segments for a curve whose chord error with `n` segments is `error / n²`.
fn segments_for(error: f32) -> usize {
    if !error.is_finite() {
        return 1;
    }
    (error / FLATNESS)
        .sqrt()
        .ceil()
        .clamp(1.0, MAX_CURVE_SEGMENTS) as usize
}

/// The smallest whole number at least `value` (at least zero), as an index: the conversion
/// truncates, without a call to `ceilf`.
fn ceil_index(value: f32) -> usize {
    let whole = value as i32;
    (if (whole as f32) < value {
        whole + 1
    } else {
        whole
    })
    .max(0) as usize
}

/// The accumulation buffer of one outline's box, `width` × `height` pixels in rows of `stride`
/// cells.
struct Area<'a> {
    cells: &'a mut [i32],
    stride: usize,
    width: f32,
    height: f32,
}

impl Area<'_> {
    /// Adds a segment in box coordinates: the parts left of the box count on its left edge (they
    /// still wind the pixels to their right), the parts right of it count on its right edge.
    fn clipped_line(&mut self, p0: Point, p1: Point) {
        let mut points = [p0, Point::zero(), Point::zero(), p1];
        let mut count = 1;
        // Split where the segment crosses x = 0 or x = width, in order along it.
        let mut crossings = [f32::NAN; 2];
        for (slot, edge) in crossings.iter_mut().zip([0.0, self.width]) {
            if (p0.x < edge) != (p1.x < edge) && p0.x != p1.x {
                *slot = (edge - p0.x) / (p1.x - p0.x);
            }
        }
        if crossings[0] > crossings[1] {
            crossings.swap(0, 1);
        }
        for t in crossings {
            if t > 0.0 && t < 1.0 {
                points[count] = Point::from_xy(p0.x + (p1.x - p0.x) * t, p0.y + (p1.y - p0.y) * t);
                count += 1;
            }
        }
        points[count] = p1;
        for pair in points[..=count].windows(2) {
            let clamp = |p: Point| Point::from_xy(p.x.clamp(0.0, self.width), p.y);
            self.line(clamp(pair[0]), clamp(pair[1]));
        }
    }

    /// Adds the signed area a segment (x within the box) covers in each pixel of each row it
    /// crosses, downward segments positive.
    fn line(&mut self, p0: Point, p1: Point) {
        if p0.y == p1.y {
            return;
        }
        let (direction, p0, p1) = if p0.y < p1.y {
            (1.0, p0, p1)
        } else {
            (-1.0, p1, p0)
        };
        let top = p0.y.max(0.0);
        let bottom = p1.y.min(self.height);
        if top >= bottom {
            return;
        }
        let dxdy = (p1.x - p0.x) / (p1.y - p0.y);
        let mut x = p0.x + (top - p0.y) * dxdy;
        let first_row = top as usize;
        let end_row = ceil_index(bottom);
        let stride = self.stride;
        let rows = self.cells[first_row * stride..end_row * stride].chunks_exact_mut(stride);
        for (y, row) in (first_row..).zip(rows) {
            let y = y as f32;
            let dy = (y + 1.0).min(bottom) - y.max(top);
            let x_next = x + dxdy * dy;
            let d = dy * direction;
            let (x_left, x_right) = if x < x_next { (x, x_next) } else { (x_next, x) };
            // Within [0, width] up to rounding, which the two spare columns absorb: truncation
            // floors them (a rounding below zero truncates to zero).
            let i0 = (x_left as i32 as usize).min(stride - 2);
            let left_floor = i0 as f32;
            let i1 = ceil_index(x_right).min(stride - 1);
            let right_ceil = i1 as f32;
            let add =
                |cell: &mut i32, value: f32| *cell = cell.wrapping_add((value * ONE as f32) as i32);
            if i1 <= i0 + 1 {
                // Within one pixel: the part right of the segment's mean x.
                let mid = 0.5 * (x_left + x_right) - left_floor;
                add(&mut row[i0], d - d * mid);
                add(&mut row[i0 + 1], d * mid);
            } else {
                // Across pixels: the trapezoids under the segment, pixel by pixel.
                let s = (x_right - x_left).recip();
                let f0 = x_left - left_floor;
                let a0 = 0.5 * s * (1.0 - f0) * (1.0 - f0);
                let f1 = x_right - right_ceil + 1.0;
                let am = 0.5 * s * f1 * f1;
                add(&mut row[i0], d * a0);
                if i1 == i0 + 2 {
                    add(&mut row[i0 + 1], d * (1.0 - a0 - am));
                } else {
                    let a1 = s * (1.5 - f0);
                    add(&mut row[i0 + 1], d * (a1 - a0));
                    let step = (d * s * ONE as f32) as i32;
                    for cell in &mut row[i0 + 2..i1 - 1] {
                        *cell = cell.wrapping_add(step);
                    }
                    let a2 = a1 + (i1 - i0 - 3) as f32 * s;
                    add(&mut row[i1 - 1], d * (1.0 - a2 - am));
                }
                add(&mut row[i1], d * am);
            }
            x = x_next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resvg::tiny_skia::Pixmap;

    fn tree(svg: &str) -> usvg::Tree {
        usvg::Tree::from_str(svg, &usvg::Options::default()).expect("test SVG")
    }

    /// `svg` drawn at its own size by `draw` (this module's `render` or `resvg::render`).
    fn drawn_with(svg: &str, draw: fn(&usvg::Tree, Transform, &mut PixmapMut)) -> Pixmap {
        let tree = tree(svg);
        let size = tree.size().to_int_size();
        let mut pixmap = Pixmap::new(size.width(), size.height()).expect("pixmap");
        draw(&tree, Transform::identity(), &mut pixmap.as_mut());
        pixmap
    }

    fn drawn(svg: &str) -> Pixmap {
        drawn_with(svg, render)
    }

    fn drawn_by_resvg(svg: &str) -> Pixmap {
        drawn_with(svg, resvg::render)
    }

    fn alpha(pixmap: &Pixmap, x: u32, y: u32) -> u8 {
        pixmap.pixel(x, y).expect("pixel").alpha()
    }

    /// Each alpha is the covered area of its pixel, to the nearest 255th (±1 for rounding).
    fn assert_coverage(pixmap: &Pixmap, expected: &[&[f32]]) {
        for (y, row) in expected.iter().enumerate() {
            for (x, area) in row.iter().enumerate() {
                let actual = alpha(pixmap, x as u32, y as u32);
                let want = area * 255.0;
                assert!(
                    (f32::from(actual) - want).abs() <= 1.0,
                    "pixel ({x}, {y}): alpha {actual}, covered area {area}"
                );
            }
        }
    }

    #[test]
    fn a_rectangle_with_fractional_edges_covers_each_pixel_by_its_area() {
        let pixmap = drawn(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="5" height="3"><rect x="1.25" y="0.5" width="2.5" height="1.5"/></svg>"#,
        );
        assert_coverage(
            &pixmap,
            &[
                &[0.0, 0.375, 0.5, 0.375, 0.0],
                &[0.0, 0.75, 1.0, 0.75, 0.0],
                &[0.0, 0.0, 0.0, 0.0, 0.0],
            ],
        );
    }

    #[test]
    fn a_diagonal_edge_covers_half_of_the_pixels_it_crosses() {
        let pixmap = drawn(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><path d="M0 0H4L0 4Z"/></svg>"#,
        );
        assert_coverage(
            &pixmap,
            &[
                &[1.0, 1.0, 1.0, 0.5],
                &[1.0, 1.0, 0.5, 0.0],
                &[1.0, 0.5, 0.0, 0.0],
                &[0.5, 0.0, 0.0, 0.0],
            ],
        );
    }

    #[test]
    fn a_circle_covers_its_area() {
        let pixmap = drawn(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="32" height="32"><circle cx="16.3" cy="15.6" r="10"/></svg>"#,
        );
        let covered: f32 = pixmap
            .pixels()
            .iter()
            .map(|p| f32::from(p.alpha()) / 255.0)
            .sum();
        let area = std::f32::consts::PI * 100.0;
        assert!(
            (covered - area).abs() < area * 0.006,
            "covered {covered}, area {area}"
        );
        // Fully inside and fully outside.
        assert_eq!(alpha(&pixmap, 16, 16), 255);
        assert_eq!(alpha(&pixmap, 2, 2), 0);
    }

    #[test]
    fn shapes_past_the_canvas_edges_are_cut_at_them() {
        // From x = -10 to 2.5 and from x = 3.5 to 20, the full height: the parts outside still
        // wind the pixels inside, and nothing wraps into the next row.
        let pixmap = drawn(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="6" height="2"><path d="M-10 -3L2.5 -3L2.5 5L-10 5Z M3.5 -1L20 0.5L20 1.5L3.5 3Z"/></svg>"#,
        );
        assert_coverage(
            &pixmap,
            &[
                &[1.0, 1.0, 0.5, 0.5, 1.0, 1.0],
                &[1.0, 1.0, 0.5, 0.5, 1.0, 1.0],
            ],
        );
    }

    #[test]
    fn non_zero_winding_fills_overlaps_once_and_leaves_opposite_holes_empty() {
        // Two squares wound the same way overlap in x 2..4; the second path's inner square is
        // wound the other way, a hole.
        let pixmap = drawn(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><path d="M0 0H4V4H0Z M2 0H6V4H2Z"/><path d="M0 4H8V8H0Z M2 5V7H6V5Z"/></svg>"#,
        );
        for x in 0..6 {
            assert_eq!(alpha(&pixmap, x, 1), 255, "x {x}");
        }
        assert_eq!(alpha(&pixmap, 7, 1), 0);
        assert_eq!(alpha(&pixmap, 1, 6), 255);
        assert_eq!(alpha(&pixmap, 3, 6), 0, "inside the hole");
        assert_eq!(alpha(&pixmap, 6, 6), 255);
    }

    #[test]
    fn strokes_and_gradients_draw_as_resvg_draws_them_up_to_edge_coverage() {
        let svg = r##"<svg xmlns="http://www.w3.org/2000/svg" width="96" height="96" viewBox="0 0 48 48">
            <defs><linearGradient id="g" x1="0" y1="0" x2="1" y2="1"><stop offset="0" stop-color="#ff6b6b"/><stop offset="1" stop-color="#3d5aff"/></linearGradient>
            <radialGradient id="r"><stop offset="0" stop-color="#fff"/><stop offset="1" stop-color="#0a8f5a" stop-opacity="0.5"/></radialGradient></defs>
            <g transform="rotate(12 24 24)"><path d="M8 10C20 2 40 6 40 24S20 46 8 38Z" fill="url(#g)" stroke="#1b1b2f" stroke-width="1.5" fill-opacity="0.8"/></g>
            <circle cx="30" cy="30" r="9" fill="url(#r)" stroke="url(#g)" stroke-width="3" stroke-dasharray="4 2"/>
            <rect x="4" y="30" width="14" height="12" rx="3" fill="hsl(43,68%,57%)" stroke="#000" stroke-width="0.4"/>
        </svg>"##;
        let ours = drawn(svg);
        let theirs = drawn_by_resvg(svg);
        let differences: Vec<u8> = ours
            .data()
            .iter()
            .zip(theirs.data())
            .map(|(a, b)| a.abs_diff(*b))
            .collect();
        let mean =
            differences.iter().map(|d| f64::from(*d)).sum::<f64>() / differences.len() as f64;
        assert!(mean < 1.0, "mean difference {mean}");
        // The same colours inside the shapes: only edge pixels differ noticeably.
        let noticeable = differences.iter().filter(|d| **d > 24).count();
        assert!(
            noticeable < differences.len() / 100,
            "{noticeable} bytes differ by more than 24"
        );
        assert_eq!(ours.pixel(30, 30), theirs.pixel(30, 30));
    }

    #[test]
    fn what_is_not_drawn_here_is_drawn_by_resvg() {
        for svg in [
            // A group drawn as a layer for its opacity.
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><g opacity="0.5"><circle cx="8" cy="8" r="5.3" fill="#c33"/></g></svg>"##,
            // A pattern paint.
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><defs><pattern id="p" width="4" height="4" patternUnits="userSpaceOnUse"><rect width="2" height="2" fill="#36c"/></pattern></defs><circle cx="8" cy="8" r="5.3" fill="url(#p)"/></svg>"##,
            // Even-odd and unsmoothed shapes (tiny-skia, shape by shape).
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><path fill-rule="evenodd" d="M1 1H15V15H1Z M4.5 4.5H11.5V11.5H4.5Z"/><circle shape-rendering="crispEdges" cx="8" cy="8" r="2.7" fill="#3a3"/></svg>"##,
        ] {
            assert_eq!(drawn(svg).data(), drawn_by_resvg(svg).data(), "{svg}");
        }
    }

    #[test]
    fn a_solid_colour_blends_as_tiny_skias_pipeline_blends_it_through_a_mask() {
        let (width, height) = (256, 8);
        // Every coverage (x) over premultiplied backgrounds of many alphas (one per row).
        let mut background = Pixmap::new(width, height).expect("pixmap");
        for (i, pixel) in background.data_mut().chunks_exact_mut(4).enumerate() {
            let (x, y) = (i % width as usize, i / width as usize);
            let alpha = ((x * 7 + y * 61) % 256) as u8;
            pixel.copy_from_slice(&[alpha / 3, alpha / 2, alpha, alpha]);
        }
        let mut mask = Mask::new(width, height).expect("mask");
        for (i, coverage) in mask.data_mut().iter_mut().enumerate() {
            *coverage = (i % width as usize) as u8;
        }
        for color in [
            tiny_skia::Color::from_rgba8(27, 27, 47, 255),
            tiny_skia::Color::from_rgba8(200, 120, 40, 135),
            tiny_skia::Color::from_rgba8(255, 255, 255, 1),
            tiny_skia::Color::from_rgba8(0, 0, 0, 0),
        ] {
            let mut paint = Paint::default();
            paint.set_color(color);
            let mut theirs = background.clone();
            let rect = Rect::from_xywh(0.0, 0.0, width as f32, height as f32).expect("rect");
            theirs.fill_rect(rect, &paint, Transform::identity(), Some(&mask));

            let source = solid_source_over(&paint).expect("a solid colour");
            let mut ours = background.clone();
            for (pixel, coverage) in ours.data_mut().chunks_exact_mut(4).zip(mask.data()) {
                if *coverage != 0 {
                    blend(pixel, source, *coverage);
                }
            }
            assert_eq!(ours.data(), theirs.data(), "{color:?}");
        }
        // Shaders and other blend modes are not blended here.
        let paint = Paint {
            blend_mode: BlendMode::Multiply,
            ..Paint::default()
        };
        assert_eq!(solid_source_over(&paint), None);
    }

    #[test]
    fn curves_become_segments_within_the_flatness() {
        assert_eq!(segments_for(0.0), 1);
        assert_eq!(segments_for(FLATNESS), 1);
        assert_eq!(segments_for(4.0 * FLATNESS), 2);
        assert_eq!(segments_for(f32::INFINITY), 1);
        assert_eq!(segments_for(1e12), MAX_CURVE_SEGMENTS as usize);
    }
}
