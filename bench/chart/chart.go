// Package chart renders small line charts as self-contained SVG: no fonts,
// scripts or external references, so a chart can be saved as a .svg file
// or inlined in an HTML page. It does just what Sluice's benchmark reports
// need: several lines over a shared x axis, linear or logarithmic y,
// step lines, dashes, a legend, and a grid of panels sharing a title.
//
// It exists instead of a plotting library so that the sluice binary, whose
// demo writes an HTML report, carries no plotting or font dependencies.
package chart

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Line is one series. X and Y have the same length; a NaN Y leaves a gap.
type Line struct {
	Name string
	X, Y []float64
	// Color is any SVG colour; "" takes the next one of Palette.
	Color string
	// Dash is an SVG stroke-dasharray such as "4 3"; "" is solid.
	Dash string
	// Width is the stroke width in pixels; 0 means 1.5.
	Width float64
	// Step draws the series as a step function: each value holds until
	// the next X.
	Step bool
}

// Chart is one panel.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	Lines  []Line
	// Width and Height in pixels; 0 means 720 x 280.
	Width, Height int
	// LogY uses a base-10 logarithmic y axis (values <= 0 are gaps).
	LogY bool
	// YMin and YMax fix the y range when YMax > YMin; otherwise it is
	// from 0 (or the smallest positive decade with LogY) to the largest
	// value, rounded to a tick.
	YMin, YMax float64
}

// Palette is the default colour sequence.
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

const (
	fontSize   = 11
	charWidth  = 6.2 // approximate width of a character at fontSize
	marginL    = 56
	marginR    = 14
	marginB    = 38
	titleH     = 20
	legendRowH = 16
)

// SVG renders c as a standalone <svg> element.
func (c *Chart) SVG() string {
	w, h := c.size()
	var b strings.Builder
	header(&b, w, h)
	c.render(&b, 0, 0)
	b.WriteString("</svg>\n")
	return b.String()
}

// Grid renders charts as panels in rows of cols, under an optional title,
// as one standalone <svg> element.
func Grid(title string, cols int, charts []Chart) string {
	if cols < 1 {
		cols = 1
	}
	cw, ch := 0, 0
	for i := range charts {
		w, h := charts[i].size()
		cw, ch = max(cw, w), max(ch, h)
	}
	top := 0
	if title != "" {
		top = titleH + 6
	}
	rows := (len(charts) + cols - 1) / cols
	w, h := cols*cw, top+rows*ch
	var b strings.Builder
	header(&b, w, h)
	if title != "" {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" font-weight="bold" text-anchor="middle">%s</text>`+"\n",
			w/2, titleH, fontSize+3, esc(title))
	}
	for i := range charts {
		charts[i].Width, charts[i].Height = cw, ch
		charts[i].render(&b, (i%cols)*cw, top+(i/cols)*ch)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func header(b *strings.Builder, w, h int) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n",
		w, h, w, h, fontSize)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
}

func (c *Chart) size() (int, int) {
	w, h := c.Width, c.Height
	if w <= 0 {
		w = 720
	}
	if h <= 0 {
		h = 280
	}
	return w, h
}

// legendLayout places legend entries in rows that fit width; it returns
// each entry's offset and the number of rows.
func (c *Chart) legendLayout(width float64) ([][2]float64, int) {
	pos := make([][2]float64, len(c.Lines))
	x, row := 0.0, 0
	for i, l := range c.Lines {
		if l.Name == "" {
			continue
		}
		wd := 26 + float64(len(l.Name))*charWidth + 14
		if x > 0 && x+wd > width {
			x, row = 0, row+1
		}
		pos[i] = [2]float64{x, float64(row)}
		x += wd
	}
	rows := 0
	if len(c.Lines) > 0 {
		rows = row + 1
	}
	return pos, rows
}

func (c *Chart) render(b *strings.Builder, ox, oy int) {
	w, h := c.size()
	fmt.Fprintf(b, `<g transform="translate(%d,%d)">`+"\n", ox, oy)
	defer b.WriteString("</g>\n")

	top := 8.0
	if c.Title != "" {
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="%d" font-weight="bold">%s</text>`+"\n", marginL, 16, fontSize+1, esc(c.Title))
		top = titleH + 4
	}
	pw := float64(w - marginL - marginR)
	pos, rows := c.legendLayout(pw)
	legendTop := top
	top += float64(rows)*legendRowH + 4
	px0, px1 := float64(marginL), float64(w-marginR)
	py0, py1 := top, float64(h-marginB)
	if py1-py0 < 20 {
		py1 = py0 + 20
	}

	xmin, xmax, ymin, ymax := c.bounds()
	xt := ticks(xmin, xmax, 8)
	if len(xt) > 0 {
		xmin, xmax = math.Min(xmin, xt[0]), math.Max(xmax, xt[len(xt)-1])
	}
	var yt []float64
	if c.LogY {
		ymin, ymax = math.Pow(10, math.Floor(math.Log10(ymin))), math.Pow(10, math.Ceil(math.Log10(ymax)))
		yt = logTicks(ymin, ymax)
	} else {
		yt = ticks(ymin, ymax, 5)
		if len(yt) > 0 && !(c.YMax > c.YMin) {
			ymin, ymax = math.Min(ymin, yt[0]), math.Max(ymax, yt[len(yt)-1])
		}
	}
	sx := func(x float64) float64 { return px0 + (x-xmin)/(xmax-xmin)*(px1-px0) }
	sy := func(y float64) float64 {
		if c.LogY {
			return py1 - (math.Log10(y)-math.Log10(ymin))/(math.Log10(ymax)-math.Log10(ymin))*(py1-py0)
		}
		return py1 - (y-ymin)/(ymax-ymin)*(py1-py0)
	}

	// Grid and axes.
	for _, t := range yt {
		y := sy(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", px0, y, px1, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", px0-5, y+4, num(t))
	}
	for _, t := range xt {
		x := sx(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#f0f0f0"/>`+"\n", x, py0, x, py1)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", x, py1+14, num(t))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", px0, py0, px1-px0, py1-py0)
	if c.XLabel != "" {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#222">%s</text>`+"\n", (px0+px1)/2, h-6, esc(c.XLabel))
	}
	if c.YLabel != "" {
		fmt.Fprintf(b, `<text transform="translate(13,%.1f) rotate(-90)" text-anchor="middle" fill="#222">%s</text>`+"\n", (py0+py1)/2, esc(c.YLabel))
	}

	// Lines, clipped to the plot area.
	clip := fmt.Sprintf("c%d_%d", ox, oy)
	fmt.Fprintf(b, `<clipPath id="%s"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"/></clipPath>`+"\n", clip, px0, py0-1, px1-px0, py1-py0+2)
	fmt.Fprintf(b, `<g clip-path="url(#%s)" fill="none" stroke-linejoin="round">`+"\n", clip)
	for i, l := range c.Lines {
		d := c.path(&l, sx, sy)
		if d == "" {
			continue
		}
		fmt.Fprintf(b, `<path d="%s" stroke="%s" stroke-width="%s"%s/>`+"\n", d, color(l, i), ff(width(l)), dash(l))
	}
	b.WriteString("</g>\n")

	// Legend.
	for i, l := range c.Lines {
		if l.Name == "" {
			continue
		}
		x := px0 + pos[i][0]
		y := legendTop + pos[i][1]*legendRowH + 8
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%s"%s/>`+"\n",
			x, y, x+20, y, color(l, i), ff(math.Max(width(l), 2)), dash(l))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#222">%s</text>`+"\n", x+25, y+4, esc(l.Name))
	}
}

// path renders l as SVG path data; NaN values (and non-positive ones on a
// log axis) break the line.
func (c *Chart) path(l *Line, sx, sy func(float64) float64) string {
	var b strings.Builder
	pen := false
	for i := range min(len(l.X), len(l.Y)) {
		x, y := l.X[i], l.Y[i]
		if math.IsNaN(y) || math.IsInf(y, 0) || (c.LogY && y <= 0) {
			pen = false
			continue
		}
		X, Y := sx(x), sy(y)
		switch {
		case !pen:
			fmt.Fprintf(&b, "M%.1f %.1f", X, Y)
			pen = true
		case l.Step:
			fmt.Fprintf(&b, "H%.1fV%.1f", X, Y)
		default:
			fmt.Fprintf(&b, "L%.1f %.1f", X, Y)
		}
	}
	return b.String()
}

// bounds returns the data range, widened so it is never empty.
func (c *Chart) bounds() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, l := range c.Lines {
		for i := range min(len(l.X), len(l.Y)) {
			x, y := l.X[i], l.Y[i]
			if math.IsNaN(y) || math.IsInf(y, 0) || (c.LogY && y <= 0) {
				continue
			}
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax, ymin, ymax = 0, 1, 0, 1
		if c.LogY {
			ymin, ymax = 1, 10
		}
	}
	if !c.LogY {
		ymin = math.Min(ymin, 0)
	}
	if c.YMax > c.YMin {
		ymin, ymax = c.YMin, c.YMax
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	if ymax <= ymin {
		if c.LogY {
			ymax = ymin * 10
		} else {
			ymax = ymin + 1
		}
	}
	return
}

// ticks returns about n round values covering [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	if !(hi > lo) || n < 1 {
		return nil
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	var out []float64
	for v := start; v <= hi+step*0.999; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// logTicks returns the powers of ten in [lo, hi], with 2 and 5 multiples
// when there are few decades.
func logTicks(lo, hi float64) []float64 {
	var out []float64
	decades := math.Log10(hi) - math.Log10(lo)
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		p := math.Pow(10, e)
		for _, m := range []float64{1, 2, 5} {
			if m != 1 && decades > 3 {
				continue
			}
			if v := m * p; v >= lo*0.999 && v <= hi*1.001 {
				out = append(out, v)
			}
		}
	}
	return out
}

// num formats a tick label compactly.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	case a >= 1:
		return trim(v)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func trim(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func color(l Line, i int) string {
	if l.Color != "" {
		return esc(l.Color)
	}
	return Palette[i%len(Palette)]
}

func width(l Line) float64 {
	if l.Width > 0 {
		return l.Width
	}
	return 1.5
}

func dash(l Line) string {
	if l.Dash == "" {
		return ""
	}
	return ` stroke-dasharray="` + esc(l.Dash) + `"`
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

func esc(s string) string { return escaper.Replace(s) }
