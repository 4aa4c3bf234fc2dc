package synth

import (
	"fmt"
	"strings"
)

// Arithmetic word problems in GSM8K's form: a question, a worked answer with one step a line,
// and a final line "#### N". Every number is computed here; the steps are kept so that tests
// can recompute them.

type mathStep struct {
	a, b int
	op   byte // + - * /
	r    int
}

type mathProblem struct {
	question string
	lines    []string // the worked answer, one step a line
	steps    []mathStep
	answer   int
}

// calc records one step and returns its result; a scenario guarantees exact division.
func (p *mathProblem) calc(a int, op byte, b int) int {
	var r int
	switch op {
	case '+':
		r = a + b
	case '-':
		r = a - b
	case '*':
		r = a * b
	case '/':
		r = a / b
	}
	p.steps = append(p.steps, mathStep{a, b, op, r})
	return r
}

// eq is the text of the last step: "a op b = r".
func (p *mathProblem) eq() string {
	s := p.steps[len(p.steps)-1]
	return fmt.Sprintf("%d %c %d = %d", s.a, s.op, s.b, s.r)
}

// text renders the problem as a document: question, answer lines, "#### N".
func (p *mathProblem) text() string {
	return "Question: " + p.question + "\nAnswer: " + strings.Join(p.lines, "\n") + fmt.Sprintf("\n#### %d", p.answer)
}

// terseText renders the problem with its answer alone: question, "Answer: #### N".
func (p *mathProblem) terseText() string {
	return "Question: " + p.question + fmt.Sprintf("\nAnswer: #### %d", p.answer)
}

// person of a problem: name and pronouns.
type person struct{ name, he, his, him string }

func (g *gen) person(avoid string) person {
	for {
		var p person
		if g.chance(0.5) {
			p = person{g.pick(girlNames), "she", "her", "her"}
		} else {
			p = person{g.pick(boyNames), "he", "his", "him"}
		}
		if p.name != avoid {
			return p
		}
	}
}

// countable things for problems: singular, plural, and containers that hold them.
type countable struct{ one, many string }

var mathItems = []countable{
	{"apple", "apples"}, {"pencil", "pencils"}, {"marble", "marbles"}, {"sticker", "stickers"}, {"cookie", "cookies"},
	{"egg", "eggs"}, {"card", "cards"}, {"book", "books"}, {"shell", "shells"}, {"orange", "oranges"}, {"toy car", "toy cars"},
	{"candle", "candles"}, {"balloon", "balloons"}, {"button", "buttons"}, {"stamp", "stamps"}, {"muffin", "muffins"},
	{"plum", "plums"}, {"bead", "beads"}, {"crayon", "crayons"}, {"bottle", "bottles"}, {"potato", "potatoes"},
	{"flower", "flowers"}, {"brick", "bricks"}, {"nail", "nails"}, {"coin", "coins"}, {"ticket", "tickets"},
	{"notebook", "notebooks"}, {"lemon", "lemons"}, {"cupcake", "cupcakes"}, {"seed packet", "seed packets"},
}

var containers = []countable{
	{"box", "boxes"}, {"bag", "bags"}, {"basket", "baskets"}, {"crate", "crates"}, {"pack", "packs"},
	{"jar", "jars"}, {"tray", "trays"}, {"carton", "cartons"}, {"tin", "tins"}, {"bucket", "buckets"},
}

var relatives = []string{"sister", "brother", "friend", "cousin", "neighbor", "teacher", "grandmother", "uncle", "aunt", "classmate"}

// smallShare is the share of problems drawn from mathSmall. A model of the built-in's size
// (2M parameters, a few million tokens) learns the answer's form from the larger problems but
// none of their arithmetic; from the small ones it learns enough arithmetic that sampled
// answers are sometimes right and sometimes wrong, which is what GRPO needs to learn from.
const smallShare = 0.8

func (g *gen) mathProblem() *mathProblem {
	for {
		var p *mathProblem
		if g.chance(smallShare) {
			p = mathSmall(g)
		} else {
			p = oneOf(g, mathScenarios)(g)
		}
		if p != nil && p.answer > 0 && p.answer <= 9999 && len(p.steps) >= 1 && len(p.steps) <= 4 {
			return p
		}
	}
}

// mathSmall: one or two steps with small numbers: sums of a number up to 20 and a digit,
// differences back, the times tables up to 9 × 9 and their divisions. The worked answer
// restates each sentence of the question before its step ("She loses 2 of them, so she has
// 12 - 2 = 10 flowers left."): a small model copies a repeated sentence long before it learns
// to find a number by its role in the question.
func mathSmall(g *gen) *mathProblem {
	p := &mathProblem{}
	who, other := g.person(""), g.person("")
	it, box := oneOf(g, mathItems), oneOf(g, containers)
	var q []string
	pending := "" // sentences restated before the next step's line
	// step records a sentence of the question and the answer line that restates it.
	step := func(sentence, result string) {
		q = append(q, sentence)
		p.lines = append(p.lines, pending+strings.TrimSuffix(sentence, ".")+", so "+result)
		pending = ""
	}
	var n int
	switch g.intn(4) {
	case 0: // a number, then more
		n = g.between(2, 20)
		s := fmt.Sprintf("%s has %d %s.", who.name, n, it.many)
		q, pending = append(q, s), s+" "
	case 1: // a number, then fewer
		n = g.between(5, 20)
		s := fmt.Sprintf("%s has %d %s.", who.name, n, it.many)
		q, pending = append(q, s), s+" "
		c := g.between(1, min(9, n-1))
		s = g.pick([]string{
			fmt.Sprintf("%s gives %d to %s.", capitalize(who.he), c, other.name),
			fmt.Sprintf("%s loses %d of them.", capitalize(who.he), c),
			fmt.Sprintf("%s eats %d of them.", capitalize(who.he), c),
		})
		n = p.calc(n, '-', c)
		step(s, fmt.Sprintf("%s has %s %s left.", who.he, p.eq(), it.many))
	case 2: // groups
		a, b := g.between(2, 9), g.between(2, 9)
		s := fmt.Sprintf("%s has %d %s with %d %s in each.", who.name, a, box.many, b, it.many)
		n = p.calc(a, '*', b)
		step(s, fmt.Sprintf("%s has %s %s.", who.he, p.eq(), it.many))
	case 3: // shared out
		a, b := g.between(2, 9), g.between(2, 9)
		s := fmt.Sprintf("%s has %d %s and puts them into %d %s, the same number in each.", who.name, a*b, it.many, a, box.many)
		n = p.calc(a*b, '/', a)
		step(s, fmt.Sprintf("each %s holds %s %s.", box.one, p.eq(), it.many))
		q = append(q, fmt.Sprintf("How many %s are in each %s?", it.many, box.one))
		p.question, p.answer = strings.Join(q, " "), n
		return p
	}
	if len(p.steps) == 0 || g.chance(0.4) { // and then more
		c := g.between(1, 9)
		s := g.pick([]string{
			fmt.Sprintf("%s %s gives %s %d more.", capitalize(who.his), g.pick(relatives), who.him, c),
			fmt.Sprintf("Then %s finds %d more.", who.he, c),
			fmt.Sprintf("%s buys %d more %s.", who.name, c, it.many),
		})
		n = p.calc(n, '+', c)
		step(s, fmt.Sprintf("%s has %s %s.", who.he, p.eq(), it.many))
	}
	q = append(q, g.pick([]string{
		fmt.Sprintf("How many %s does %s have now?", it.many, who.name),
		fmt.Sprintf("How many %s does %s have in the end?", it.many, who.name),
	}))
	p.question, p.answer = strings.Join(q, " "), n
	return p
}

var mathScenarios = []func(g *gen) *mathProblem{mathCollection, mathCollection, mathShopping, mathTravel, mathSaving,
	mathReading, mathBuses, mathBaking, mathFarm, mathAges, mathFactory, mathMinutes}

// mathCollection: a quantity of one item, changed by two or three events.
func mathCollection(g *gen) *mathProblem {
	p := &mathProblem{}
	who, other := g.person(""), g.person("")
	it, box := oneOf(g, mathItems), oneOf(g, containers)
	var q []string
	var n int
	if g.chance(0.6) {
		a, b := g.between(2, 12), g.between(3, 25)
		q = append(q, fmt.Sprintf("%s has %d %s of %s. Each %s holds %d %s.", who.name, a, box.many, it.many, box.one, b, it.many))
		n = p.calc(a, '*', b)
		p.lines = append(p.lines, fmt.Sprintf("%s starts with %s %s.", who.name, p.eq(), it.many))
	} else {
		n = g.between(10, 200)
		q = append(q, fmt.Sprintf("%s has %d %s.", who.name, n, it.many))
	}
	events := g.between(1, 3)
	shared := false
	for i := 0; i < events && len(p.steps) < 4; i++ {
		last := i == events-1
		switch k := g.intn(5); {
		case k == 0: // find or get more
			c := g.between(2, 60)
			q = append(q, g.pick([]string{
				fmt.Sprintf("%s %s gives %s %d more.", capitalize(who.his), g.pick(relatives), who.him, c),
				fmt.Sprintf("Then %s finds %d more %s.", who.he, c, it.many),
				fmt.Sprintf("%s buys %d more %s.", who.name, c, it.many),
			}))
			n = p.calc(n, '+', c)
			p.lines = append(p.lines, fmt.Sprintf("With %d more, %s has %s %s.", c, who.he, p.eq(), it.many))
		case k == 1 && len(p.steps) <= 2: // more boxes
			c, d := g.between(2, 9), g.between(2, 20)
			q = append(q, fmt.Sprintf("Then %s buys %d more %s with %d %s in each.", who.he, c, box.many, d, it.many))
			e := p.calc(c, '*', d)
			p.lines = append(p.lines, fmt.Sprintf("The new %s hold %s %s.", box.many, p.eq(), it.many))
			n = p.calc(n, '+', e)
			p.lines = append(p.lines, fmt.Sprintf("Now %s has %s %s.", who.he, p.eq(), it.many))
		case k == 2 && n > 4: // give away
			c := g.between(1, n-1)
			q = append(q, g.pick([]string{
				fmt.Sprintf("%s gives %d %s to %s.", capitalize(who.he), c, it.many, other.name),
				fmt.Sprintf("%s loses %d of them.", capitalize(who.he), c),
				fmt.Sprintf("%s uses %d %s for a school project.", who.name, c, it.many),
			}))
			n = p.calc(n, '-', c)
			p.lines = append(p.lines, fmt.Sprintf("After that, %s has %s %s left.", who.he, p.eq(), it.many))
		case k == 3 && n <= 3000: // multiply
			m := g.between(2, 3)
			q = append(q, fmt.Sprintf("By the end of the month, %s has %s as many %s as before.", who.he, map[int]string{2: "twice", 3: "three times"}[m], it.many))
			n = p.calc(n, '*', m)
			p.lines = append(p.lines, fmt.Sprintf("%s times as many is %s %s.", capitalize(numberWord(m)), p.eq(), it.many))
		case k == 4 && last: // share equally
			ds := divisors(n, 2, 12)
			if len(ds) == 0 {
				continue
			}
			d := oneOf(g, ds)
			q = append(q, fmt.Sprintf("%s shares all the %s equally among %d friends.", who.name, it.many, d))
			n = p.calc(n, '/', d)
			p.lines = append(p.lines, fmt.Sprintf("Each friend gets %s %s.", p.eq(), it.many))
			shared = true
		}
	}
	if shared {
		q = append(q, fmt.Sprintf("How many %s does each friend get?", it.many))
	} else {
		q = append(q, g.pick([]string{
			fmt.Sprintf("How many %s does %s have now?", it.many, who.name),
			fmt.Sprintf("How many %s does %s have in the end?", it.many, who.name),
		}))
	}
	p.question, p.answer = strings.Join(q, " "), n
	return p
}

// divisors lists the divisors of n in [lo, hi].
func divisors(n, lo, hi int) []int {
	var out []int
	for d := lo; d <= hi; d++ {
		if n%d == 0 {
			out = append(out, d)
		}
	}
	return out
}

var shopItems = []countable{{"notebook", "notebooks"}, {"pen", "pens"}, {"toy", "toys"}, {"sandwich", "sandwiches"}, {"ticket", "tickets"},
	{"shirt", "shirts"}, {"plant", "plants"}, {"ball", "balls"}, {"book", "books"}, {"cup of juice", "cups of juice"}, {"puzzle", "puzzles"}, {"lamp", "lamps"}}

func mathShopping(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	xs := pickN(g, shopItems, 2)
	a, pa := g.between(2, 9), g.between(1, 40)
	b, pb := g.between(1, 6), g.between(2, 60)
	q := fmt.Sprintf("%s buys %d %s for $%d each and %d %s for $%d each.", who.name, a, xs[0].many, pa, b, xs[1].many, pb)
	ca := p.calc(a, '*', pa)
	p.lines = append(p.lines, fmt.Sprintf("The %s cost %s dollars.", xs[0].many, p.eq()))
	cb := p.calc(b, '*', pb)
	p.lines = append(p.lines, fmt.Sprintf("The %s cost %s dollars.", xs[1].many, p.eq()))
	total := p.calc(ca, '+', cb)
	p.lines = append(p.lines, fmt.Sprintf("Together that is %s dollars.", p.eq()))
	if g.chance(0.5) {
		bill := ((total / 50) + 1) * 50
		if g.chance(0.5) {
			bill = ((total / 100) + 1) * 100
		}
		q += fmt.Sprintf(" %s pays with $%d. How much change does %s get?", capitalize(who.he), bill, who.he)
		p.answer = p.calc(bill, '-', total)
		p.lines = append(p.lines, fmt.Sprintf("The change is %s dollars.", p.eq()))
	} else {
		q += " How much does " + who.he + " spend in all?"
		p.answer = total
	}
	p.question = q
	return p
}

var vehicles = []string{"train", "bus", "truck", "car", "boat", "ferry", "plane", "tram"}

func mathTravel(g *gen) *mathProblem {
	p := &mathProblem{}
	v := g.pick(vehicles)
	s1, t1, s2, t2 := g.between(2, 20)*5, g.between(1, 6), g.between(2, 20)*5, g.between(1, 6)
	q := fmt.Sprintf("A %s travels at %d km per hour for %d hours, then at %d km per hour for %d hours.", v, s1, t1, s2, t2)
	d1 := p.calc(s1, '*', t1)
	p.lines = append(p.lines, fmt.Sprintf("In the first part it travels %s km.", p.eq()))
	d2 := p.calc(s2, '*', t2)
	p.lines = append(p.lines, fmt.Sprintf("In the second part it travels %s km.", p.eq()))
	if d1 != d2 && g.chance(0.3) {
		hi, lo, which := d1, d2, "first"
		if d2 > d1 {
			hi, lo, which = d2, d1, "second"
		}
		q += fmt.Sprintf(" How many more km does it travel in the %s part than in the other?", which)
		p.answer = p.calc(hi, '-', lo)
		p.lines = append(p.lines, fmt.Sprintf("The difference is %s km.", p.eq()))
	} else {
		q += " How far does it travel in total?"
		p.answer = p.calc(d1, '+', d2)
		p.lines = append(p.lines, fmt.Sprintf("In total it travels %s km.", p.eq()))
	}
	p.question = q
	return p
}

var wants = []string{"a bicycle", "a guitar", "a pair of skates", "a tent", "a telescope", "a new game", "a camera", "a scooter", "a watch", "a kite set"}

func mathSaving(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	a, w := g.between(2, 50), g.between(2, 20)
	q := fmt.Sprintf("%s saves $%d every week for %d weeks.", who.name, a, w)
	saved := p.calc(a, '*', w)
	p.lines = append(p.lines, fmt.Sprintf("%s saves %s dollars.", who.name, p.eq()))
	if g.chance(0.5) {
		gift := g.between(5, 100)
		q += fmt.Sprintf(" %s %s gives %s $%d more.", capitalize(who.his), g.pick(relatives), who.him, gift)
		saved = p.calc(saved, '+', gift)
		p.lines = append(p.lines, fmt.Sprintf("With the gift %s has %s dollars.", who.he, p.eq()))
	}
	cost := g.between(1, saved-1)
	q += fmt.Sprintf(" Then %s buys %s for $%d. How much money does %s have left?", who.he, g.pick(wants), cost, who.he)
	p.answer = p.calc(saved, '-', cost)
	p.lines = append(p.lines, fmt.Sprintf("After buying it, %s has %s dollars left.", who.he, p.eq()))
	p.question = q
	return p
}

func mathReading(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	a, d := g.between(5, 40), g.between(2, 14)
	read := a * d
	total := read + g.between(10, 400)
	q := fmt.Sprintf("A book has %d pages. %s reads %d pages every day for %d days.", total, who.name, a, d)
	read = p.calc(a, '*', d)
	p.lines = append(p.lines, fmt.Sprintf("%s reads %s pages.", who.name, p.eq()))
	left := p.calc(total, '-', read)
	p.lines = append(p.lines, fmt.Sprintf("%s pages are left.", p.eq()))
	if ds := divisors(left, 2, 10); len(ds) > 0 && g.chance(0.5) {
		k := oneOf(g, ds)
		q += fmt.Sprintf(" %s wants to finish the rest in %d days, reading the same number of pages each day. How many pages must %s read each day?", capitalize(who.he), k, who.he)
		p.answer = p.calc(left, '/', k)
		p.lines = append(p.lines, fmt.Sprintf("Each day %s must read %s pages.", who.he, p.eq()))
	} else {
		q += " How many pages are left to read?"
		p.answer = left
	}
	p.question = q
	return p
}

func mathBuses(g *gen) *mathProblem {
	p := &mathProblem{}
	group := oneOf(g, []struct{ org, unit, people string }{{"school", "classes", "students"}, {"club", "teams", "members"}, {"camp", "cabins", "children"},
		{"company", "departments", "workers"}, {"choir", "sections", "singers"}, {"sports day", "groups", "runners"}})
	ride := oneOf(g, []struct{ what, verb string }{{"buses", "ride in"}, {"vans", "travel in"}, {"boats", "cross the lake in"}, {"tables", "sit at"}, {"tents", "sleep in"}, {"cars", "drive in"}})
	size := g.between(3, 40)
	seats := g.between(2, 60)
	units := g.between(2, 20)
	for (units*size)%seats != 0 {
		units++
	}
	q := fmt.Sprintf("A %s has %d %s with %d %s in each. For a trip, the %s %s %s that hold %d each. How many %s are needed?",
		group.org, units, group.unit, size, group.people, group.people, ride.verb, ride.what, seats, ride.what)
	n := p.calc(units, '*', size)
	p.lines = append(p.lines, fmt.Sprintf("There are %s %s.", p.eq(), group.people))
	p.answer = p.calc(n, '/', seats)
	p.lines = append(p.lines, fmt.Sprintf("They need %s %s.", p.eq(), ride.what))
	p.question = q
	return p
}

func mathBaking(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	food := oneOf(g, []countable{{"cookie", "cookies"}, {"muffin", "muffins"}, {"bun", "buns"}, {"cupcake", "cupcakes"}, {"biscuit", "biscuits"}})
	trays, per := g.between(2, 8), g.between(6, 24)
	n := trays * per
	eaten := g.between(1, 10)
	box := g.between(2, 12)
	for (n-eaten)%box != 0 {
		eaten++
	}
	if eaten >= n {
		return nil
	}
	q := fmt.Sprintf("%s bakes %d trays of %s with %d %s on each tray. %s family eats %d of them, and %s puts the rest into boxes of %d. How many boxes does %s fill?",
		who.name, trays, food.many, per, food.many, capitalize(who.his), eaten, who.he, box, who.he)
	n = p.calc(trays, '*', per)
	p.lines = append(p.lines, fmt.Sprintf("%s bakes %s %s.", who.name, p.eq(), food.many))
	n = p.calc(n, '-', eaten)
	p.lines = append(p.lines, fmt.Sprintf("After the family eats some, %s are left.", p.eq()))
	p.answer = p.calc(n, '/', box)
	p.lines = append(p.lines, fmt.Sprintf("That fills %s boxes.", p.eq()))
	p.question = q
	return p
}

func mathFarm(g *gen) *mathProblem {
	p := &mathProblem{}
	crop := oneOf(g, []struct{ plant, fruit string }{{"tomato plants", "tomatoes"}, {"apple trees", "apples"}, {"pepper plants", "peppers"}, {"bean plants", "beans"}, {"lemon trees", "lemons"}})
	rows, per, each := g.between(2, 15), g.between(3, 20), g.between(2, 30)
	q := fmt.Sprintf("A farmer has %d rows of %s with %d in each row. Each one gives %d %s.", rows, crop.plant, per, each, crop.fruit)
	plants := p.calc(rows, '*', per)
	p.lines = append(p.lines, fmt.Sprintf("There are %s plants.", p.eq()))
	total := p.calc(plants, '*', each)
	p.lines = append(p.lines, fmt.Sprintf("They give %s %s.", p.eq(), crop.fruit))
	if total > 20 && g.chance(0.5) {
		sold := g.between(1, total-1)
		q += fmt.Sprintf(" The farmer sells %d of them at the market. How many %s are left?", sold, crop.fruit)
		p.answer = p.calc(total, '-', sold)
		p.lines = append(p.lines, fmt.Sprintf("After selling, %s are left.", p.eq()))
	} else {
		q += fmt.Sprintf(" How many %s does the farmer get?", crop.fruit)
		p.answer = total
	}
	p.question = q
	return p
}

func mathAges(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	parent, elder := g.pick([]string{"mother", "father", "aunt", "uncle"}), g.pick([]string{"grandmother", "grandfather", "great-aunt", "great-uncle"})
	age, m, older := g.between(2, 16), g.between(2, 5), g.between(15, 40)
	q := fmt.Sprintf("%s is %d years old. %s %s is %d times as old as %s. %s %s is %d years older than %s %s.",
		who.name, age, capitalize(who.his), parent, m, who.name, capitalize(who.his), elder, older, who.his, parent)
	mid := p.calc(age, '*', m)
	p.lines = append(p.lines, fmt.Sprintf("%s %s is %s years old.", capitalize(who.his), parent, p.eq()))
	top := p.calc(mid, '+', older)
	p.lines = append(p.lines, fmt.Sprintf("%s %s is %s years old.", capitalize(who.his), elder, p.eq()))
	if g.chance(0.4) {
		q += fmt.Sprintf(" How old will %s %s be in %d years?", who.his, elder, age)
		p.answer = p.calc(top, '+', age)
		p.lines = append(p.lines, fmt.Sprintf("In %d years, %s will be %s years old.", age, who.his+" "+elder, p.eq()))
	} else if g.chance(0.5) {
		q += fmt.Sprintf(" How many years older than %s is %s %s?", who.name, who.his, elder)
		p.answer = p.calc(top, '-', age)
		p.lines = append(p.lines, fmt.Sprintf("The difference is %s years.", p.eq()))
	} else {
		q += fmt.Sprintf(" How old is %s %s?", who.his, elder)
		p.answer = top
	}
	p.question = q
	return p
}

func mathFactory(g *gen) *mathProblem {
	p := &mathProblem{}
	it := oneOf(g, []countable{{"bottle", "bottles"}, {"toy", "toys"}, {"chair", "chairs"}, {"brick", "bricks"}, {"bolt", "bolts"}, {"cup", "cups"}})
	perDay, days := g.between(20, 900), g.between(2, 7)
	q := fmt.Sprintf("A factory makes %d %s each day. It works for %d days.", perDay, it.many, days)
	made := p.calc(perDay, '*', days)
	p.lines = append(p.lines, fmt.Sprintf("The factory makes %s %s.", p.eq(), it.many))
	if ds := divisors(made, 4, 50); len(ds) > 0 && g.chance(0.6) {
		box := oneOf(g, ds)
		q += fmt.Sprintf(" The %s are packed in boxes of %d. How many boxes are filled?", it.many, box)
		p.answer = p.calc(made, '/', box)
		p.lines = append(p.lines, fmt.Sprintf("That fills %s boxes.", p.eq()))
	} else {
		broken := g.between(1, made/10+1)
		q += fmt.Sprintf(" %d of the %s are broken. How many good %s are there?", broken, it.many, it.many)
		p.answer = p.calc(made, '-', broken)
		p.lines = append(p.lines, fmt.Sprintf("%s good %s remain.", p.eq(), it.many))
	}
	p.question = q
	return p
}

func mathMinutes(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	act := g.pick([]string{"practices the piano", "runs", "studies", "draws", "swims", "reads"})
	a, d := g.between(2, 12)*5, g.between(2, 14)
	for (a*d)%60 != 0 {
		d++
	}
	q := fmt.Sprintf("%s %s for %d minutes every day for %d days. How many hours is that in total?", who.name, act, a, d)
	m := p.calc(a, '*', d)
	p.lines = append(p.lines, fmt.Sprintf("That is %s minutes.", p.eq()))
	p.answer = p.calc(m, '/', 60)
	p.lines = append(p.lines, fmt.Sprintf("In hours that is %s.", p.eq()))
	p.question = q
	return p
}

func mathParty(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	guests := g.between(4, 40)
	ab := pickN(g, partyItems, 2)
	a, b := ab[0], ab[1]
	x, y := g.between(2, 6), g.between(2, 5)
	event := g.pick([]string{"birthday party", "picnic", "class party", "family dinner", "garden party", "game night"})
	q := fmt.Sprintf("%s is planning a %s for %d guests. Each guest gets %d %s and %d %s.", who.name, event, guests, x, a.many, y, b.many)
	na := p.calc(guests, '*', x)
	p.lines = append(p.lines, fmt.Sprintf("%s needs %s %s.", who.name, p.eq(), a.many))
	nb := p.calc(guests, '*', y)
	p.lines = append(p.lines, fmt.Sprintf("%s also needs %s %s.", capitalize(who.he), p.eq(), b.many))
	if g.chance(0.5) {
		q += fmt.Sprintf(" How many %s and %s does %s need in all?", a.many, b.many, who.he)
		p.answer = p.calc(na, '+', nb)
		p.lines = append(p.lines, fmt.Sprintf("In all that is %s things.", p.eq()))
	} else {
		price := g.between(1, 9)
		q += fmt.Sprintf(" The %s cost $%d each. How much does %s spend on %s?", a.many, price, who.he, a.many)
		p.answer = p.calc(na, '*', price)
		p.lines = append(p.lines, fmt.Sprintf("The %s cost %s dollars.", a.many, p.eq()))
		p.steps = append(p.steps[:1], p.steps[2:]...)
		p.lines = append(p.lines[:1], p.lines[2:]...)
	}
	p.question = q
	return p
}

var partyItems = []countable{{"cupcake", "cupcakes"}, {"balloon", "balloons"}, {"juice box", "juice boxes"}, {"sandwich", "sandwiches"},
	{"party hat", "party hats"}, {"cookie", "cookies"}, {"sticker", "stickers"}, {"slice of pizza", "slices of pizza"}, {"napkin", "napkins"}, {"paper cup", "paper cups"}}

func mathWages(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	job := g.pick([]string{"at a bakery", "at the library", "as a dog walker", "at a garden shop", "at the pool", "as a babysitter", "at a cafe", "at the market"})
	rate, hours, days := g.between(5, 25), g.between(2, 8), g.between(2, 6)
	q := fmt.Sprintf("%s works %s. %s earns $%d an hour and works %d hours a day for %d days.", who.name, job, capitalize(who.he), rate, hours, days)
	perDay := p.calc(rate, '*', hours)
	p.lines = append(p.lines, fmt.Sprintf("Each day %s earns %s dollars.", who.he, p.eq()))
	total := p.calc(perDay, '*', days)
	p.lines = append(p.lines, fmt.Sprintf("In %d days %s earns %s dollars.", days, who.he, p.eq()))
	if g.chance(0.5) {
		spent := g.between(1, total-1)
		q += fmt.Sprintf(" %s spends $%d on %s. How much money is left?", capitalize(who.he), spent, g.pick([]string{"a bus pass", "new shoes", "books", "a present", "lunch"}))
		p.answer = p.calc(total, '-', spent)
		p.lines = append(p.lines, fmt.Sprintf("%s has %s dollars left.", capitalize(who.he), p.eq()))
	} else {
		q += fmt.Sprintf(" How much does %s earn in total?", who.he)
		p.answer = total
	}
	p.question = q
	return p
}

func mathTrip(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	dest := g.pick([]string{"the lake", "the city", "the mountains", "the coast", "a farm", "the zoo", "the museum", "a castle"})
	perLiter := g.between(5, 20)
	dist := perLiter * g.between(2, 30)
	q := fmt.Sprintf("%s drives to %s, which is %d km away, and then drives back home. %s car goes %d km on one liter of fuel. How many liters of fuel does the trip use?",
		who.name, dest, dist, capitalize(who.his), perLiter)
	both := p.calc(dist, '*', 2)
	p.lines = append(p.lines, fmt.Sprintf("There and back is %s km.", p.eq()))
	p.answer = p.calc(both, '/', perLiter)
	p.lines = append(p.lines, fmt.Sprintf("The car uses %s liters.", p.eq()))
	if g.chance(0.4) {
		price := g.between(1, 3)
		q = strings.TrimSuffix(q, " How many liters of fuel does the trip use?") + fmt.Sprintf(" Fuel costs $%d a liter. How much does the fuel for the trip cost?", price)
		p.answer = p.calc(p.answer, '*', price)
		p.lines = append(p.lines, fmt.Sprintf("The fuel costs %s dollars.", p.eq()))
	}
	p.question = q
	return p
}

func mathRecipe(g *gen) *mathProblem {
	p := &mathProblem{}
	who := g.person("")
	food := oneOf(g, []countable{{"pancake", "pancakes"}, {"cookie", "cookies"}, {"muffin", "muffins"}, {"waffle", "waffles"}, {"dumpling", "dumplings"}})
	ing := g.pick([]string{"grams of flour", "grams of sugar", "grams of butter", "milliliters of milk", "grams of oats"})
	makes, need, times := g.between(4, 24), g.between(2, 30)*10, g.between(2, 6)
	want := makes * times
	q := fmt.Sprintf("A recipe uses %d %s to make %d %s. %s wants to make %d %s.", need, ing, makes, food.many, who.name, want, food.many)
	k := p.calc(want, '/', makes)
	p.lines = append(p.lines, fmt.Sprintf("%s must make the recipe %s times.", who.name, p.eq()))
	total := p.calc(need, '*', k)
	p.lines = append(p.lines, fmt.Sprintf("That needs %s %s.", p.eq(), ing))
	if have := g.between(1, total-1); g.chance(0.5) {
		q += fmt.Sprintf(" %s has %d %s. How many more does %s need?", capitalize(who.he), have, ing, who.he)
		p.answer = p.calc(total, '-', have)
		p.lines = append(p.lines, fmt.Sprintf("%s needs %s more.", capitalize(who.he), p.eq()))
	} else {
		q += fmt.Sprintf(" How many %s does %s need?", ing, who.he)
		p.answer = total
	}
	p.question = q
	return p
}

func mathScores(g *gen) *mathProblem {
	p := &mathProblem{}
	team := g.pick([]string{"The Tigers", "The Falcons", "The Rovers", "The Comets", "The Otters", "The Giants", "The Red Stars", "The Sharks"})
	sport := g.pick([]string{"basketball", "football", "hockey", "volleyball", "handball"})
	games, pts, bonus := g.between(2, 12), g.between(3, 40), g.between(1, 30)
	q := fmt.Sprintf("%s play %s. They score %d points in each of their %d games, and they get %d bonus points at the end of the season.", team, sport, pts, games, bonus)
	s := p.calc(pts, '*', games)
	p.lines = append(p.lines, fmt.Sprintf("In the games they score %s points.", p.eq()))
	total := p.calc(s, '+', bonus)
	p.lines = append(p.lines, fmt.Sprintf("With the bonus they have %s points.", p.eq()))
	if other := g.between(1, total-1); g.chance(0.5) {
		q += fmt.Sprintf(" The second team has %d points. How many more points do %s have?", other, strings.ToLower(team[:1])+team[1:])
		p.answer = p.calc(total, '-', other)
		p.lines = append(p.lines, fmt.Sprintf("They are ahead by %s points.", p.eq()))
	} else {
		q += " How many points do they have in total?"
		p.answer = total
	}
	p.question = q
	return p
}

func mathFundraiser(g *gen) *mathProblem {
	p := &mathProblem{}
	group := g.pick([]string{"The school band", "A soccer team", "The art club", "A class", "The scouts", "The garden club"})
	it := oneOf(g, []countable{{"cake", "cakes"}, {"lemonade", "cups of lemonade"}, {"raffle ticket", "raffle tickets"}, {"candle", "candles"}, {"plant", "plants"}, {"bookmark", "bookmarks"}})
	n, price, cost := g.between(10, 300), g.between(1, 12), g.between(5, 200)
	q := fmt.Sprintf("%s sells %d %s for $%d each to raise money.", group, n, it.many, price)
	got := p.calc(n, '*', price)
	p.lines = append(p.lines, fmt.Sprintf("They take in %s dollars.", p.eq()))
	if cost < got {
		q += fmt.Sprintf(" The supplies cost $%d. How much money do they raise after paying for the supplies?", cost)
		p.answer = p.calc(got, '-', cost)
		p.lines = append(p.lines, fmt.Sprintf("After the supplies, they have %s dollars.", p.eq()))
	} else {
		return nil
	}
	if ds := divisors(p.answer, 2, 6); len(ds) > 0 && g.chance(0.4) {
		k := oneOf(g, ds)
		q = strings.TrimSuffix(q, " How much money do they raise after paying for the supplies?") +
			fmt.Sprintf(" They share what is left equally among %d charities. How much does each charity get?", k)
		p.answer = p.calc(p.answer, '/', k)
		p.lines = append(p.lines, fmt.Sprintf("Each charity gets %s dollars.", p.eq()))
	}
	p.question = q
	return p
}

func init() {
	mathScenarios = append(mathScenarios, mathParty, mathWages, mathTrip, mathRecipe, mathScores, mathFundraiser)
}

// drillShare is the share of math documents that are practice sheets rather than problems.
const drillShare = 0.25

// terseShare is the share of problems whose answer is the final line alone, as in answer keys:
// "Answer: #### 22". A model trained on both kinds answers at once about as often as it works
// the steps, and right far less often when it does; choosing to work the steps is what the
// math preset's rewards teach a GRPO run on the built-in model first.
const terseShare = 0.5

func makeMath(g *gen) string {
	if g.chance(drillShare) {
		return g.drillSheet()
	}
	p := g.mathProblem()
	if g.chance(terseShare) {
		return p.terseText()
	}
	return p.text()
}

// drillSheet is a practice sheet: a title and 16 to 40 facts of one kind, "a op b = r", with
// the small numbers of mathSmall. A fact costs about six tokens here against sixty in a word
// problem, so a small model sees each one often enough to learn it.
func (g *gen) drillSheet() string {
	kinds := []struct {
		title string
		fact  func() (int, byte, int, int)
	}{
		{"sums", func() (int, byte, int, int) { a, b := g.between(1, 20), g.between(1, 9); return a, '+', b, a + b }},
		{"differences", func() (int, byte, int, int) { b, r := g.between(1, 9), g.between(0, 20); return r + b, '-', b, r }},
		{"times tables", func() (int, byte, int, int) { a, b := g.between(2, 9), g.between(2, 9); return a, '*', b, a * b }},
		{"sharing", func() (int, byte, int, int) { a, r := g.between(2, 9), g.between(2, 9); return a * r, '/', a, r }},
	}
	var b strings.Builder
	var mixed []int
	if g.chance(0.25) {
		mixed = []int{0, 1, 2, 3}
		b.WriteString(g.pick([]string{"Practice sheet: mixed facts", "Mixed practice", "Warm-up: all four kinds"}))
	} else {
		k := g.intn(len(kinds))
		mixed = []int{k}
		b.WriteString(g.pick([]string{"Practice sheet: ", "Facts to learn: ", "Warm-up: "}) + kinds[k].title)
	}
	b.WriteString("\n")
	for i, n := 0, g.between(16, 40); i < n; i++ {
		x, op, y, r := kinds[oneOf(g, mixed)].fact()
		fmt.Fprintf(&b, "%d %c %d = %d\n", x, op, y, r)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// mathPrompt is a problem up to "Answer:", with the number as the answer and the worked
// solution as the reference. Prompts are mathSmall's problems only: the ones a model of the
// built-in's size can learn to solve, so that what a run changes shows in its rewards rather
// than drowning in problems no completion gets right.
func mathPrompt(g *gen) Prompt {
	var p *mathProblem
	for p == nil || p.answer <= 0 {
		p = mathSmall(g)
	}
	t := p.text()
	i := strings.Index(t, "\nAnswer:") + len("\nAnswer:")
	return Prompt{Prompt: t[:i], Answer: fmt.Sprint(p.answer), Reference: t[i:]}
}
