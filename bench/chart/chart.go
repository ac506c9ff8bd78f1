// Package chart draws the line charts of Sluice's benchmark reports with
// gonum.org/v1/plot, as SVG: several lines over a shared x axis, linear or
// logarithmic y, step lines, dashes, a legend, and a grid of panels under
// one title.
//
// The SVG is self-contained (no scripts, images or external references)
// and starts with its <svg> element, so it can be saved as a .svg file or
// inlined in an HTML page. Text is laid out with the Liberation Sans
// metrics that gonum/plot carries; the font is named, not embedded (that
// would add about 400 kB per chart), with Arial and Helvetica, which have
// the same metrics, and sans-serif as fallbacks.
package chart

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Line is one series. X and Y have the same length; a NaN or infinite Y
// (and a Y <= 0 on a logarithmic axis) leaves a gap.
type Line struct {
	// Name is the legend entry; "" leaves the line out of the legend.
	Name string
	X, Y []float64
	// Color is "#rgb" or "#rrggbb"; "" takes the next one of Palette.
	// Any other value panics: colours are part of the code.
	Color string
	// Dash is the lengths of dashes and gaps in pixels ({4, 3}); nil is
	// solid.
	Dash []float64
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
	// The x axis runs from 0 (or the smallest X, if negative) to the
	// largest X.
	// LogY uses a base-10 logarithmic y axis, from the decade below the
	// smallest value to the decade above the largest.
	LogY bool
	// YMin and YMax fix the y range when YMax > YMin; otherwise it is
	// from 0 to the largest value rounded up to 1, 2, 2.5 or 5 times a
	// power of ten.
	YMin, YMax float64
}

// Palette is the default colour sequence.
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// px is one CSS pixel in vg's unit (points): the SVG's width and height
// are in points, so a chart of 720 pixels shows 720 pixels wide.
const px = vg.Length(0.75)

// Text sizes in pixels.
const (
	fontSize  = 11
	titleSize = 12
)

var (
	sans  = font.Font{Typeface: "Liberation", Variant: "Sans"} // gonum/plot's default is the serif
	plain = font.From(sans, fontSize*px)
	bold  = func() font.Font {
		f := font.From(sans, titleSize*px)
		f.Weight = xfont.WeightBold
		return f
	}()
	textColor = color.Gray{Y: 0x22}
)

// SVG renders c as a standalone <svg> element.
func (c *Chart) SVG() string {
	w, h := c.size()
	canvas := vgsvg.New(vg.Length(w)*px, vg.Length(h)*px)
	dc := draw.New(canvas)
	fill(dc, color.White)
	c.draw(dc)
	return finish(canvas)
}

// Grid renders charts as panels in rows of cols, under an optional title,
// as one standalone <svg> element. Every panel takes the size of the
// largest.
func Grid(title string, cols int, charts []Chart) string {
	cols = max(cols, 1)
	cw, ch := 0, 0
	for i := range charts {
		w, h := charts[i].size()
		cw, ch = max(cw, w), max(ch, h)
	}
	top := 0
	if title != "" {
		top = 26
	}
	rows := max((len(charts)+cols-1)/cols, 1)
	canvas := vgsvg.New(vg.Length(cols*cw)*px, vg.Length(top+rows*ch)*px)
	dc := draw.New(canvas)
	fill(dc, color.White)
	if title != "" {
		// Left-aligned, as the panels' titles: text is placed with
		// Liberation's metrics, so centred text would drift right in a
		// wider fallback font.
		sty := fitted(font.From(bold, (titleSize+2)*px), title, dc.Max.X-dc.Min.X-12*px)
		dc.FillText(sty, vg.Point{X: dc.Min.X + 4*px, Y: dc.Max.Y - vg.Length(top-6)*px}, title)
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols}
	body := draw.Crop(dc, 0, 0, 0, -vg.Length(top)*px)
	for i := range charts {
		charts[i].draw(tiles.At(body, i%cols, i/cols))
	}
	return finish(canvas)
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

// draw draws the panel into dc: its title, its legend in rows across the
// top, and the plot below.
func (c *Chart) draw(dc draw.Canvas) {
	dc = draw.Crop(dc, 4*px, -10*px, 4*px, -6*px)
	if c.Title != "" {
		sty := fitted(bold, c.Title, dc.Max.X-dc.Min.X-44*px)
		dc.FillText(sty, vg.Point{X: dc.Min.X + 44*px, Y: dc.Max.Y - sty.Rectangle(c.Title).Max.Y}, c.Title)
		dc = draw.Crop(dc, 0, 0, 0, -(titleSize+8)*px)
	}
	dc = draw.Crop(dc, 0, 0, 0, -c.drawLegend(draw.Crop(dc, 44*px, 0, 0, 0)))
	c.plot().Draw(dc)
}

// drawLegend draws one gonum legend entry per named line, left to right,
// wrapping into rows at the width of dc, and returns the height used.
func (c *Chart) drawLegend(dc draw.Canvas) vg.Length {
	const rowH = 16 * px
	x, y, used := dc.Min.X, dc.Max.Y, vg.Length(0)
	for i, l := range c.Lines {
		if l.Name == "" {
			continue
		}
		leg := plot.NewLegend()
		leg.TextStyle = textStyle(plain)
		leg.Top, leg.Left = true, true
		leg.ThumbnailWidth = 20 * px
		leg.Add(l.Name, &plotter.Line{LineStyle: c.lineStyle(l, i, 2)})
		r := leg.Rectangle(dc)
		w := r.Max.X - r.Min.X + 20*px // room for wider fallback fonts
		if x > dc.Min.X && x+w > dc.Max.X {
			x, y = dc.Min.X, y-rowH
		}
		cell := dc
		cell.Min = vg.Point{X: x, Y: y - rowH}
		cell.Max = vg.Point{X: x + w, Y: y}
		leg.Draw(cell)
		x += w
		used = dc.Max.Y - (y - rowH)
	}
	if used > 0 {
		used += 4 * px
	}
	return used
}

// plot builds the gonum plot of c: axes, grid and lines, no title or
// legend (draw places those).
func (c *Chart) plot() *plot.Plot {
	p := plot.New()
	p.BackgroundColor = nil
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		// Only font and colour: the axes' default styles hold their
		// alignment and rotation.
		a.Label.TextStyle.Font, a.Label.TextStyle.Color = plain, textColor
		a.Tick.Label.Font, a.Tick.Label.Color = plain, color.Gray{Y: 0x44}
		a.LineStyle.Color = color.Gray{Y: 0x99}
		a.Tick.LineStyle.Color = color.Gray{Y: 0x99}
		a.Padding = 0
	}
	p.X.Label.Text, p.Y.Label.Text = c.XLabel, c.YLabel
	p.X.Tick.Marker = compact{plot.DefaultTicks{}}
	p.Y.Tick.Marker = compact{plot.DefaultTicks{}}
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = color.Gray{Y: 0xf0}, color.Gray{Y: 0xe5}
	grid.Vertical.Width, grid.Horizontal.Width = px, px
	p.Add(grid)

	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, l := range c.Lines {
		for _, seg := range c.segments(l) {
			line, err := plotter.NewLine(seg)
			if err != nil {
				panic(fmt.Sprintf("chart: %v", err)) // segments holds finite values only
			}
			line.LineStyle = c.lineStyle(l, i, 0)
			if l.Step {
				line.StepStyle = plotter.PostStep
			}
			p.Add(line)
			for _, pt := range seg {
				xmin, xmax = math.Min(xmin, pt.X), math.Max(xmax, pt.X)
				ymin, ymax = math.Min(ymin, pt.Y), math.Max(ymax, pt.Y)
			}
		}
	}
	if math.IsInf(xmin, 1) { // no data
		xmin, xmax, ymin, ymax = 0, 1, 1, 1
	}
	p.X.Min = math.Min(xmin, 0)
	p.X.Max = math.Max(xmax, p.X.Min+1)
	switch {
	case c.YMax > c.YMin:
		p.Y.Min, p.Y.Max = c.YMin, c.YMax
	case c.LogY:
		p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(ymin))), math.Pow(10, math.Ceil(math.Log10(ymax)))
		if p.Y.Max <= p.Y.Min {
			p.Y.Max = p.Y.Min * 10
		}
	default:
		p.Y.Min, p.Y.Max = math.Min(ymin, 0), NiceCeil(ymax)
	}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}
	return p
}

// segments splits l into runs of points that can be drawn: finite, and
// positive on a logarithmic axis.
func (c *Chart) segments(l Line) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i := range min(len(l.X), len(l.Y)) {
		x, y := l.X[i], l.Y[i]
		if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) || (c.LogY && y <= 0) {
			if len(cur) > 0 {
				out, cur = append(out, cur), nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: x, Y: y})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// lineStyle is the stroke of the i-th line, at least minWidth pixels wide.
func (c *Chart) lineStyle(l Line, i int, minWidth float64) draw.LineStyle {
	col := l.Color
	if col == "" {
		col = Palette[i%len(Palette)]
	}
	w := l.Width
	if w <= 0 {
		w = 1.5
	}
	sty := draw.LineStyle{Color: parseColor(col), Width: vg.Length(math.Max(w, minWidth)) * px}
	for _, d := range l.Dash {
		sty.Dashes = append(sty.Dashes, vg.Length(d)*px)
	}
	return sty
}

// parseColor reads "#rgb" or "#rrggbb".
func parseColor(s string) color.Color {
	hex := strings.TrimPrefix(s, "#")
	if len(hex) == 3 {
		hex = string([]byte{hex[0], hex[0], hex[1], hex[1], hex[2], hex[2]})
	}
	v, err := strconv.ParseUint(hex, 16, 32)
	if err != nil || len(hex) != 6 || !strings.HasPrefix(s, "#") {
		panic(fmt.Sprintf("chart: colour %q is not #rgb or #rrggbb", s))
	}
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 0xff}
}

// fitted is the text style of f for txt, its size reduced (to no less
// than 8 pixels) if txt would be wider than width. It leaves room for a
// fallback font up to 30% wider than Liberation Sans (DejaVu Sans Bold).
func fitted(f font.Font, txt string, width vg.Length) text.Style {
	sty := textStyle(f)
	if w := sty.Width(txt) * 1.3; w > width {
		sty.Font.Size = max(f.Size*width/w, 8*px)
	}
	return sty
}

func textStyle(f font.Font) text.Style {
	return text.Style{Font: f, Color: textColor, Handler: plot.DefaultTextHandler}
}

func fill(dc draw.Canvas, c color.Color) {
	dc.SetColor(c)
	dc.Fill(dc.Rectangle.Path())
}

// finish returns the SVG document of canvas from its <svg> element on,
// with fallbacks for the font: a bare "Liberation Sans" would fall back to
// the browser's default font, often a serif.
func finish(canvas *vgsvg.Canvas) string {
	var b bytes.Buffer
	if _, err := canvas.WriteTo(&b); err != nil {
		panic(fmt.Sprintf("chart: %v", err)) // writing to a buffer cannot fail
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:] // the XML declaration and a generator comment
	}
	return strings.ReplaceAll(s, "font-family:Liberation Sans;", "font-family:Liberation Sans,Arial,Helvetica,sans-serif;")
}

// compact labels the ticks of a Ticker compactly: 12k, 3M, 0.05.
type compact struct{ plot.Ticker }

func (t compact) Ticks(lo, hi float64) []plot.Tick {
	ticks := t.Ticker.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = num(ticks[i].Value)
		}
	}
	return ticks
}

// logTicks are plot.LogTicks, labelled compactly, with the 2 and 5
// multiples labelled too when the axis spans at most three decades.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	// LogTicks truncates log10(lo) toward zero, which skips the lowest
	// decade below 1 (0.1 becomes 1): start a hair lower.
	ticks := plot.LogTicks{}.Ticks(lo*(1-1e-9), hi)
	few := hi/lo <= 1001
	for i := range ticks {
		v := ticks[i].Value
		m := v / math.Pow(10, math.Floor(math.Log10(v)+1e-9)) // 1 to 9
		if ticks[i].Label != "" || few && (math.Abs(m-2) < 1e-6 || math.Abs(m-5) < 1e-6) {
			ticks[i].Label = num(v)
		}
	}
	return ticks
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

// NiceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for
// v <= 0).
func NiceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= v {
			return m * mag
		}
	}
	return 10 * mag
}
