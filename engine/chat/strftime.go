package chat

import (
	"strconv"
	"strings"
	"time"
)

// Strftime formats t as Python's datetime.strftime does on glibc (the C locale), for the
// directives chat templates use: %a %A %b %h %B %c %C %d %D %e %F %H %I %j %k %l %m %M %n %p
// %R %S %t %T %u %w %y %Y %z %Z %%, and glibc's "-" flag, which drops the padding (%-d).
// Other directives are kept as written, as glibc keeps them.
func Strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		pad := true
		if format[j] == '-' && j+1 < len(format) {
			pad = false
			j++
		}
		num := func(v, width int, fill byte) {
			s := strconv.Itoa(v)
			for pad && len(s) < width {
				s = string(fill) + s
			}
			b.WriteString(s)
		}
		hour12 := t.Hour() % 12
		if hour12 == 0 {
			hour12 = 12
		}
		switch format[j] {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'c':
			b.WriteString(Strftime(t, "%a %b %e %H:%M:%S %Y"))
		case 'C':
			num(t.Year()/100, 2, '0')
		case 'd':
			num(t.Day(), 2, '0')
		case 'D':
			b.WriteString(Strftime(t, "%m/%d/%y"))
		case 'e':
			num(t.Day(), 2, ' ')
		case 'F':
			b.WriteString(Strftime(t, "%Y-%m-%d"))
		case 'H':
			num(t.Hour(), 2, '0')
		case 'I':
			num(hour12, 2, '0')
		case 'j':
			num(t.YearDay(), 3, '0')
		case 'k':
			num(t.Hour(), 2, ' ')
		case 'l':
			num(hour12, 2, ' ')
		case 'm':
			num(int(t.Month()), 2, '0')
		case 'M':
			num(t.Minute(), 2, '0')
		case 'n':
			b.WriteByte('\n')
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'R':
			b.WriteString(Strftime(t, "%H:%M"))
		case 'S':
			num(t.Second(), 2, '0')
		case 't':
			b.WriteByte('\t')
		case 'T':
			b.WriteString(Strftime(t, "%H:%M:%S"))
		case 'u':
			num((int(t.Weekday())+6)%7+1, 1, '0')
		case 'w':
			num(int(t.Weekday()), 1, '0')
		case 'y':
			num(t.Year()%100, 2, '0')
		case 'Y':
			num(t.Year(), 1, '0')
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteString(format[i : j+1])
		}
		i = j
	}
	return b.String()
}
