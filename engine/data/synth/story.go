package synth

// Stories: one hero, often a friend, a place, and a plot whose beats come in a fixed order
// (opening, problem, attempts, help, resolution), so that names, pronouns and objects stay
// consistent across the story: the structure a small model can learn, and whose absence a
// perplexity reward can notice.

type character struct {
	name, kind, trait string
	he, him, his      string
}

func (g *gen) newCharacter(avoid string) character {
	for {
		var c character
		switch g.intn(5) {
		case 0, 1:
			c = character{name: g.pick(girlNames), kind: g.pick(girlKinds), he: "she", him: "her", his: "her"}
		case 2, 3:
			c = character{name: g.pick(boyNames), kind: g.pick(boyKinds), he: "he", him: "him", his: "his"}
		default:
			c = character{name: g.pick(petNames), kind: g.pick(animalKinds)}
			if g.intn(2) == 0 {
				c.he, c.him, c.his = "she", "her", "her"
			} else {
				c.he, c.him, c.his = "he", "him", "his"
			}
		}
		c.trait = g.pick(traits)
		if c.name != avoid {
			return c
		}
	}
}

// cast sets the variables of a character under a prefix: $hero, $he, $He, $him, $his, $His,
// $kind, $trait, $a_kind ("a brave fox") for the hero; $friend, $fhe, $fHe, $fhim, $fhis,
// $fkind, $a_fkind for the friend.
func (g *gen) cast(hero, friend character) {
	v := g.vars
	v["hero"], v["kind"], v["trait"] = hero.name, hero.kind, hero.trait
	v["he"], v["He"], v["him"], v["his"], v["His"] = hero.he, capitalize(hero.he), hero.him, hero.his, capitalize(hero.his)
	v["a_kind"] = withArticle(hero.trait + " " + hero.kind)
	v["friend"], v["fkind"] = friend.name, friend.kind
	v["fhe"], v["fHe"], v["fhim"], v["fhis"] = friend.he, capitalize(friend.he), friend.him, friend.his
	v["a_fkind"] = withArticle(friend.trait + " " + friend.kind)
}

func (g *gen) setPlace(p place) {
	v := g.vars
	v["place"], v["in_place"] = p.name, p.in+" "+p.name
	spots := pickN(g, p.spots, 3)
	v["spot1"], v["spot2"], v["spot3"] = spots[0], spots[1], spots[2]
	v["sight"], v["sound"], v["creature"] = g.pick(p.sights), g.pick(p.sounds), p.creature
	v["a_creature"] = withArticle(p.creature)
}

var (
	storyOpen = tmpls(
		"$time, $a_kind named $hero lived $in_place.",
		"$time, there was $a_kind called $hero who lived $in_place.",
		"$in_place, there lived $a_kind named $hero.",
		"$hero was $a_kind who lived $in_place.",
		"$time, $in_place, there lived $a_kind. {$His name was $hero.|Everyone called $him $hero.}",
		"$hero, $a_kind, {had always|had} lived $in_place.",
	)
	storySetting = tmpls(
		"Every day, $sight.",
		"{It was a place where|In that place,} $sight.",
		"{$He loved the mornings there, when|$He liked to sit by the window while} $sound.",
		"{That day|On that day}, $weather.",
		"From $his {house|window|door}, $he could see that $sight.",
		"{All day long|From morning to night}, $sound.",
	)
	storyEnd = tmpls(
		"The end.",
		"And that is how it happened.",
		"{It was|That was} the best day $he had had in a long time.",
		"{That night|That evening}, $hero fell asleep with a smile.",
		"{And|So} everything was well again in $place.",
	)
)

// storyPlots are the plot types; each writes its beats in order.
var storyPlots = []func(g *gen){plotLost, plotMake, plotJourney, plotFear, plotMystery, plotShare, plotContest}

func makeStory(g *gen) string {
	g.storyText()
	return g.b.String()
}

func (g *gen) storyText() {
	hero := g.newCharacter("")
	g.cast(hero, g.newCharacter(hero.name))
	p := oneOf(g, places)
	g.setPlace(p)
	v := g.vars
	v["time"], v["weather"] = g.pick(timeOpeners), g.pick(weathers)
	v["feel"], v["bad"] = g.pick(feelings), g.pick(badFeelings)
	v["thing"] = g.pick(colors) + " " + g.pick(things)
	v["a_thing"] = withArticle(v["thing"])
	g.say(storyOpen...)
	g.cut()
	for _, t := range pickN(g, storySetting, g.between(1, 2)) {
		g.say(t)
		g.vars["sight"], g.vars["sound"] = g.pick(p.sights), g.pick(p.sounds)
	}
	g.para()
	oneOf(g, storyPlots)(g)
	if g.chance(0.4) {
		g.say(storyEnd...)
	}
}

// Plot: a treasured thing is lost, searched for, found with a friend's help.
var (
	lostHave = tmpls(
		"$He had $a_thing that $his {grandmother|grandfather|aunt|uncle|mother|father} had {given|made for} $him.",
		"$His {favorite|most precious} thing in the world was $a_thing.",
		"$hero {always carried|never went anywhere without} $a_thing.",
	)
	lostLose = tmpls(
		"One day, $he took the $thing to play $spot1. When $he {looked again|turned around|came back}, the $thing was gone.",
		"{One afternoon|That day}, $he {put|left} the $thing down $spot1 for a moment. When $he came back, it was not there.",
		"While $he was playing $spot1, the $thing {slipped out of $his hands|fell from $his pocket}, and $he did not see where it went.",
	)
	lostCry = tmpls(
		"$hero felt very $bad.",
		"\"{Where is my $thing?|Oh no, my $thing!|Has anyone seen my $thing?}\" {cried|said|asked} $hero.",
		"$hero's eyes filled with tears. {$He felt so $bad.|$He did not know what to do.}",
	)
	lostSearch = tmpls(
		"$He looked $spot1 again, but it was not there.",
		"{First|Then} $he searched $spot2, but $he found only {an old leaf|a broken cup|some mud|a lost sock|a snail}.",
		"$He {looked|searched} $spot2 and {then|after that} $spot1, but the $thing was nowhere to be found.",
		"$He asked {everyone|a $creature and an old $fkind} if they had seen it, but nobody had.",
	)
	lostFriend = tmpls(
		"Just then, $friend, $a_fkind, came by. \"Why are you so $bad?\" asked $friend.",
		"$friend, $a_fkind, saw $hero {searching|crying} and came over. \"What is wrong?\" $fhe asked.",
		"{Soon|After a while}, $hero met $friend, $a_fkind. $friend asked what had happened.",
	)
	lostTell = tmpls(
		"\"I lost my $thing,\" said $hero.",
		"$hero told $friend about the $thing.",
		"\"My $thing is gone, and I have looked everywhere,\" said $hero.",
	)
	lostHelp = tmpls(
		"\"I will help you,\" said $friend. \"Let us look $spot3.\"",
		"\"I saw something {shiny|small|strange} $spot3,\" said $friend. \"Maybe it is your $thing.\"",
		"$friend thought for a moment. \"Have you looked $spot3?\" $fhe asked.",
	)
	lostFound = tmpls(
		"Together they went $spot3. There, {under a leaf|in the mud|behind a stone|next to $a_creature}, was the $thing!",
		"They hurried $spot3, and there it was: the $thing, {safe and sound|a little dirty but not broken}.",
		"$spot3, they found $a_creature sitting on the $thing. The $creature {hopped|ran|moved} away, and $hero picked it up.",
	)
	lostEnd = tmpls(
		"$hero {hugged|thanked} $friend. \"Thank you for your help,\" $he said.",
		"$hero was so $feel. \"You are a true friend,\" $he told $friend.",
		"\"I could not have found it without you,\" said $hero.",
	)
	lostMoral = tmpls(
		"From that day on, $hero kept the $thing {safe|close}, and $hero and $friend became {good|best} friends.",
		"After that, $hero never left the $thing alone again.",
		"$hero learned that {a friend can make a big problem small|it is good to ask for help}.",
	)
)

func plotLost(g *gen) {
	g.say(lostHave...)
	g.say(lostLose...)
	g.say(lostCry...)
	for n := g.between(1, 2); n > 0; n-- {
		g.say(lostSearch...)
	}
	g.para()
	g.say(lostFriend...)
	g.say(lostTell...)
	g.say(lostHelp...)
	g.say(lostFound...)
	g.para()
	g.say(lostEnd...)
	g.say(lostMoral...)
}

// project is something a hero makes: materials, a first failure and its fix.
type project struct {
	name      string
	materials []string
	fail, fix string
	success   string
}

var projects = []project{
	{"kite", []string{"thin sticks", "colored paper", "string", "glue", "a long tail of ribbons"}, "it spun in circles and crashed", "a longer tail", "flew high over the trees"},
	{"birdhouse", []string{"small boards", "nails", "a hammer", "paint", "a round piece of wood"}, "the roof slid off", "a few more nails", "stood firm on its pole"},
	{"boat", []string{"a flat piece of wood", "a stick for a mast", "cloth for a sail", "rope", "tar"}, "it tipped over in the water", "a heavy stone at the bottom", "sailed straight across the pond"},
	{"cake", []string{"flour", "eggs", "sugar", "butter", "milk", "a pinch of salt"}, "it came out flat and hard", "more eggs and a hotter oven", "rose tall and golden"},
	{"snowman", []string{"fresh snow", "two stones for eyes", "a carrot", "an old hat", "a scarf"}, "the head kept rolling off", "a smaller head and wet snow", "stood proudly in the yard"},
	{"treehouse", []string{"planks", "a ladder", "rope", "nails", "an old blanket"}, "the floor creaked and bent", "a thick beam under the floor", "was strong enough for three friends"},
	{"scarecrow", []string{"straw", "old clothes", "a sack for the head", "a broom stick", "a hat"}, "the wind blew it over", "a deeper hole for the pole", "kept every crow away from the corn"},
	{"wagon", []string{"four wheels", "a crate", "two poles", "a handle", "bolts"}, "one wheel fell off", "tighter bolts", "rolled smoothly down the road"},
	{"sandcastle", []string{"wet sand", "a bucket", "a spade", "shells", "a little flag"}, "the towers crumbled", "sand mixed with more water", "had four towers and a moat"},
	{"garden", []string{"seeds", "a shovel", "a watering can", "good soil", "small stones for a path"}, "nothing grew for days", "more water and more sun", "was full of flowers by summer"},
	{"song", []string{"an old guitar", "a notebook", "a pencil", "a quiet room"}, "the words did not fit the tune", "shorter lines", "made everyone clap along"},
	{"robot", []string{"a tin box", "wires", "two small motors", "a battery", "bottle caps for eyes"}, "it only moved backwards", "the wires turned the other way", "rolled forward and waved its arm"},
}

var (
	makeWant = tmpls(
		"$hero wanted to {build|make} $a_proj for the {spring fair|town festival|big contest|$friend's birthday}.",
		"{For a long time|All winter}, $hero had dreamed of making $a_proj.",
		"\"I will make $a_proj,\" $hero {said one day|decided|told $his family}.",
	)
	makeGather = tmpls(
		"$He {collected|gathered|found} $materials.",
		"First, $he needed $materials.",
		"$He {went around $place and found|asked $his neighbors for} $materials.",
	)
	makeFail = tmpls(
		"At first, {nothing went right|things went wrong}: $fail.",
		"$He worked all day, but when $he tried it, $fail.",
		"The first try was a {failure|disaster}, because $fail.",
	)
	makeSad = tmpls(
		"$hero {felt $bad|sat down and sighed}.",
		"\"{It will never work|I give up},\" said $hero.",
	)
	makeAdvice = tmpls(
		"$friend, $a_fkind, came by and {looked at it|listened}. \"Maybe you need $fix,\" $fhe said.",
		"Then $friend had an idea. \"{Try|Why not try} $fix,\" said $friend.",
		"$His friend $friend {knew a lot about such things|had made one before}. \"You need $fix,\" $fhe explained.",
	)
	makeRetry = tmpls(
		"$hero tried again. This time $he used $fix, and the $proj $success.",
		"So $hero {started over|tried once more} with $fix. {To $his joy|At last}, the $proj $success.",
		"With $fix, the new $proj $success.",
	)
	makeEnd = tmpls(
		"Everyone {admired|cheered for} the $proj, and $hero felt $feel.",
		"$hero and $friend {laughed|smiled} and {looked at|admired} the $proj together.",
		"\"We did it!\" said $hero. $He felt very $feel.",
	)
)

func plotMake(g *gen) {
	p := oneOf(g, projects)
	v := g.vars
	v["proj"], v["a_proj"] = p.name, withArticle(p.name)
	v["materials"] = list(pickN(g, p.materials, min(3, len(p.materials))))
	v["fail"], v["fix"], v["success"] = p.fail, p.fix, p.success
	g.say(makeWant...)
	g.say(makeGather...)
	g.say(makeFail...)
	g.say(makeSad...)
	g.para()
	g.say(makeAdvice...)
	g.say(makeRetry...)
	g.say(makeEnd...)
}

// obstacle is something on the road, and how it is overcome.
type obstacle struct{ problem, solution string }

var obstacles = []obstacle{
	{"a wide river with no bridge", "$he crossed on a row of stepping stones"},
	{"a dark tunnel", "$he lit a small lantern and walked through slowly"},
	{"a steep hill", "$he climbed it step by step and rested at the top"},
	{"a sudden storm", "$he waited under a big tree until the rain stopped"},
	{"a fallen tree across the path", "$he climbed over its branches"},
	{"a barking dog", "$he spoke softly and gave it a piece of bread"},
	{"a deep puddle", "$he jumped over it with a long run"},
	{"a locked gate", "$he found a small gap in the fence"},
	{"a fork in the road", "$he remembered the map and took the left path"},
	{"a thick fog", "$he followed the sound of the bells"},
}

var gifts = []string{"a basket of fresh bread", "a jar of honey", "a warm blanket", "a pot of soup", "a bunch of flowers", "a letter", "a box of cookies", "some medicine", "a new book", "a pie"}

var (
	journeyStart = tmpls(
		"$friend, $hero's {old friend|cousin|grandmother's neighbor}, lived far away in $place2. One day, $hero decided to bring $fhim $gift.",
		"$hero had to bring $gift to $friend, who lived {on the other side of|far beyond} the hills in $place2.",
		"{News came that|$hero heard that} $friend was {sick|lonely|sad} in $place2, so $hero packed $gift and set off.",
	)
	journeyMeet = tmpls(
		"On the way, $he came to $problem. {$He stopped and thought.|\"What now?\" $he wondered.} In the end, $solution.",
		"Soon there was $problem. $hero did not give up: $solution.",
		"{After an hour|Later|Further on}, $hero met $problem, but $solution.",
	)
	journeyHelp = tmpls(
		"$a_creature {showed $him the way|walked beside $him for a while}.",
		"A kind traveler told $him {the shortest way|which road to take}.",
	)
	journeyArrive = tmpls(
		"At last, $hero reached $place2. $friend was so $feel to see $him.",
		"{By evening|When the sun was low}, $hero arrived at $friend's door. $friend {opened it|smiled} and said, \"You came all this way for me?\"",
	)
	journeyEnd = tmpls(
		"They shared $gift and talked until {evening|the stars came out}.",
		"$friend thanked $him again and again, and $hero forgot how tired $he was.",
		"The way home seemed {short|easy}, because $hero's heart was full.",
	)
)

func plotJourney(g *gen) {
	v := g.vars
	p2 := oneOf(g, places)
	for p2.name == v["place"] {
		p2 = oneOf(g, places)
	}
	v["place2"], v["gift"] = p2.name, g.pick(gifts)
	g.say(journeyStart...)
	g.para()
	for _, o := range pickN(g, obstacles, g.between(1, 3)) {
		v["problem"] = o.problem
		v["solution"] = g.phrase(compile(o.solution))
		g.say(journeyMeet...)
	}
	if g.chance(0.5) {
		g.say(journeyHelp...)
	}
	g.para()
	g.say(journeyArrive...)
	g.say(journeyEnd...)
}

var fears = []struct{ fear, where string }{
	{"the dark", "in the dark cellar"},
	{"deep water", "at the end of the jetty"},
	{"thunder", "outside in the storm"},
	{"big dogs", "in the yard of the big dog"},
	{"high places", "at the top of the old tree"},
	{"the old house at the end of the street", "inside the old house"},
	{"speaking in front of others", "on the stage"},
	{"the noisy machines", "next to the loud machines"},
	{"bees", "near the bee hives"},
	{"the tall ladder", "on the roof"},
}

var (
	fearHave = tmpls(
		"$hero was afraid of $fear.",
		"{There was only one thing|The only thing} $hero feared was $fear.",
		"Even though $he was $a_kind, $hero was afraid of $fear.",
	)
	fearAvoid = tmpls(
		"Whenever $he {thought of|saw} it, $his knees {shook|went weak}.",
		"$He always {found an excuse|walked the long way around} to stay away from it.",
	)
	fearEvent = tmpls(
		"One day, $friend's {little kitten|hat|ball} was stuck $where. \"Please help!\" cried $friend.",
		"Then one day, $friend {got stuck|needed help} $where, and nobody else was near.",
	)
	fearAct = tmpls(
		"$hero {took a deep breath|counted to ten|closed $his eyes for a moment} and went anyway.",
		"$hero's heart was beating fast, but $he {stepped forward|did not run away}.",
	)
	fearLearn = tmpls(
		"It was not as {scary|bad} as $he had thought.",
		"To $his surprise, $he felt {braver|stronger} with every step.",
	)
	fearEnd = tmpls(
		"After that, $hero was never so afraid of $fear again.",
		"\"You were so brave,\" said $friend. $hero smiled; $he felt $feel.",
		"$hero learned that being brave means doing something even when you are afraid.",
	)
)

func plotFear(g *gen) {
	f := oneOf(g, fears)
	g.vars["fear"], g.vars["where"] = f.fear, f.where
	g.say(fearHave...)
	g.say(fearAvoid...)
	g.para()
	g.say(fearEvent...)
	g.say(fearAct...)
	g.say(fearLearn...)
	g.say(fearEnd...)
}

var (
	mysteryHear = tmpls(
		"Every night, $hero heard a strange sound coming from somewhere $spot1. It went {tap, tap, tap|scratch, scratch|squeak, squeak|thump, thump}.",
		"{For three nights|For a whole week}, a strange noise came from somewhere $spot1: {tap, tap|a soft scratching|a little squeak}.",
	)
	mysteryWorry = tmpls(
		"$He was too $bad to sleep.",
		"\"What could it be?\" $he wondered. {$He pulled the blanket over $his head.|$He could not stop thinking about it.}",
	)
	mysteryGo = tmpls(
		"One night, $hero took $tool and went to look.",
		"At last, $hero {took $tool and|and $friend} went outside to find out.",
		"\"I have to know what it is,\" $hero said, and $he {took|picked up} $tool.",
	)
	mysteryFind = tmpls(
		"$He followed the sound, and $spot2 $he found $a_creature {with a hurt leg|that was looking for food|building a nest|trying to get out of the rain}.",
		"$spot2 sat $a_creature, {shivering|hungry|all alone}. It had made the noise all along!",
	)
	mysteryHelp = tmpls(
		"$hero {gave it some bread|made it a bed from an old blanket|helped it find its family}.",
		"$He {carried it inside|brought it warm milk} and let it rest.",
	)
	mysteryEnd = tmpls(
		"After that, the noise stopped, but the $creature came back every day {to say hello|for breakfast}.",
		"The $creature became $hero's {new friend|secret friend}, and $hero was never afraid of the noise again.",
	)
)

func plotMystery(g *gen) {
	g.vars["tool"] = g.pick([]string{"a lantern", "a flashlight", "a candle", "a small lamp"})
	g.say(mysteryHear...)
	g.say(mysteryWorry...)
	g.para()
	g.say(mysteryGo...)
	g.say(mysteryFind...)
	g.say(mysteryHelp...)
	g.say(mysteryEnd...)
}

var shared = []struct{ item, how string }{
	{"last piece of cake", "cut it into two equal pieces"},
	{"seat on the swing", "took turns, ten pushes each"},
	{"ripe apple", "shared it, one bite each"},
	{"red crayon", "drew one picture together"},
	{"window seat on the bus", "sat there one after the other"},
	{"new ball", "played a game with it together"},
	{"big umbrella", "walked home close together under it"},
	{"last cookie", "broke it in half"},
}

var (
	shareStart = tmpls(
		"$hero and $friend, $a_fkind, both wanted the $item.",
		"{One day|At lunch}, $hero and $friend {reached|ran} for the $item at the same time.",
	)
	shareFight = tmpls(
		"\"It is mine!\" said $hero. \"No, I saw it first!\" said $friend.",
		"They started to argue, and soon both of them were $bad.",
		"\"Give it to me!\" shouted $friend. \"No!\" shouted $hero.",
	)
	shareAdvice = tmpls(
		"{An old $kind2|Their teacher|A wise owl} {heard them|came by} and said, \"Why not share?\"",
		"Then $hero {had an idea|stopped and thought}. \"What if we share?\" $he asked.",
	)
	shareDo = tmpls(
		"So they $how.",
		"In the end, they $how, and it was {more fun|much better} that way.",
	)
	shareEnd = tmpls(
		"They both felt $feel, and they {played together|laughed together} for the rest of the day.",
		"$hero learned that sharing can make two people happy instead of one.",
	)
)

func plotShare(g *gen) {
	s := oneOf(g, shared)
	g.vars["item"], g.vars["how"], g.vars["kind2"] = s.item, s.how, g.pick(animalKinds)
	g.say(shareStart...)
	g.say(shareFight...)
	g.para()
	g.say(shareAdvice...)
	g.say(shareDo...)
	g.say(shareEnd...)
}

var contests = []struct{ name, practice, win string }{
	{"race", "ran around $place every morning", "crossed the line first"},
	{"baking contest", "baked a new cake every evening", "won the blue ribbon for the best cake"},
	{"singing contest", "sang every song $he knew, again and again", "sang so well that the whole crowd stood up"},
	{"boat race", "rowed on the water until $his arms ached", "reached the finish flag first"},
	{"spelling contest", "read the dictionary every night", "spelled the hardest word without a mistake"},
	{"kite festival", "flew $his kite in every wind", "had the kite that flew highest"},
	{"chess match", "played chess with $his grandfather every day", "won the final game"},
	{"drawing contest", "drew pictures of everything $he saw", "won first prize for a drawing of $his home"},
}

var (
	contestStart = tmpls(
		"Every year there was a {great|big} $contest $in_place, and this year $hero wanted to win.",
		"$hero {heard about|saw a poster for} the $contest, and $he decided to take part.",
	)
	contestPractice = tmpls(
		"For weeks, $he $practice.",
		"Every day $he $practice, even when $he was tired.",
	)
	contestRival = tmpls(
		"$friend, $a_fkind, wanted to win too.",
		"$His friend $friend {entered the contest too|was the one to beat}.",
	)
	contestWin = tmpls(
		"On the day of the $contest, $hero $win. Everyone cheered, and $he felt $feel.",
		"When the day came, $hero $win. $friend was the first to shake $his hand.",
	)
	contestLose = tmpls(
		"On the day of the $contest, $friend won, and $hero came second. At first $he felt $bad, but then $he {smiled|clapped for $friend}.",
		"$hero did $his best, but $friend won. \"Next year,\" said $hero, \"I will try again.\"",
	)
	contestEnd = tmpls(
		"{Winning was not the most important thing|All that practice had been worth it}; $hero had learned a lot.",
		"That evening, $hero and $friend walked home together, talking about next year.",
	)
)

func plotContest(g *gen) {
	c := oneOf(g, contests)
	v := g.vars
	v["contest"] = c.name
	v["practice"], v["win"] = g.phrase(compile(c.practice)), g.phrase(compile(c.win))
	g.say(contestStart...)
	g.say(contestPractice...)
	g.say(contestRival...)
	g.para()
	if g.chance(0.6) {
		g.say(contestWin...)
	} else {
		g.say(contestLose...)
	}
	g.say(contestEnd...)
}

// storyPrompt is a story's opening (its first sentence, and sometimes more), to be continued.
func storyPrompt(g *gen) Prompt {
	g.storyText()
	return g.promptAtCut()
}

// Plot: the hero is new in town and makes a friend.
var (
	newMove = tmpls(
		"$hero and $his family had just moved to $place from far away.",
		"{It was $hero's first week|$hero had only been} $in_place, and $he did not know anyone yet.",
		"When $hero's family moved to $place, $he had to leave all $his old friends behind.",
	)
	newLonely = tmpls(
		"Every day $he walked past the neighbors, but nobody said hello. $He felt $bad.",
		"$He spent the afternoons alone {$spot1|at home}, {drawing pictures|reading|kicking a ball against a wall}.",
		"\"Nobody here wants to play with me,\" $he told $his {mother|father|grandmother}.",
	)
	newMeet = tmpls(
		"Then one day $he saw $friend, $a_fkind, sitting alone $spot2. $friend was trying to fix a broken $thing2. \"Can I help?\" asked $hero. $friend looked up and smiled.",
		"One afternoon, $friend, $a_fkind, dropped a $thing2 $spot2, and $hero picked it up. \"Is this yours?\" asked $hero. \"Yes, thank you!\" said $friend. \"I am $friend. Who are you?\"",
	)
	newBond = tmpls(
		"They {talked|played} until the sun went down and found out that they both loved {stories about dragons|the same songs|building things|the sea}.",
		"Soon the two of them met every day $spot3.",
	)
	newEnd = tmpls(
		"$place did not feel strange anymore. $hero had a friend, and $he felt $feel.",
		"{After that|From then on}, $hero was never lonely $in_place again.",
	)
)

func plotNewFriend(g *gen) {
	g.vars["thing2"] = g.pick(things)
	g.say(newMove...)
	g.say(newLonely...)
	g.para()
	g.say(newMeet...)
	g.say(newBond...)
	g.say(newEnd...)
}

// Plot: a storm, and the hero helps the neighbors.
var (
	stormCome = tmpls(
		"{That evening|In the afternoon}, the sky turned dark and a {great|terrible|sudden} storm came $in_place.",
		"The {wind|rain} grew stronger and stronger until a real storm was blowing over $place.",
	)
	stormDamage = tmpls(
		"The wind {tore the roof off|knocked over|broke the windows of} $victim's {shed|barn|house|shop}.",
		"{Water flooded|A tree fell across} the path to $victim's house.",
		"The rain washed away $victim's {garden|fence|little bridge}.",
	)
	stormHelp = tmpls(
		"When the storm was over, {$hero put on $his boots and went|$hero did not wait: $he went} to help $victim.",
		"The next morning, $hero and $friend went to see what they could do for $victim.",
	)
	stormWork = tmpls(
		"They {carried away the branches|dried the wet floor|nailed new boards in place|dug a ditch for the water}, and soon {other neighbors|more and more people} came to help too.",
		"All day they worked together. $hero's hands were {tired|sore}, but $he did not stop.",
	)
	stormEnd = tmpls(
		"By evening, {everything was fixed|the worst work was done}. $Victim {gave everyone hot soup|thanked them all} and said, \"What would I do without {good neighbors|you}?\"",
		"$Victim was so $feel. \"You are a real neighbor,\" $victim told $hero.",
	)
)

func plotStorm(g *gen) {
	victim := g.newCharacter(g.vars["hero"])
	for victim.name == g.vars["friend"] {
		victim = g.newCharacter(g.vars["hero"])
	}
	g.vars["victim"] = "old " + victim.name
	if g.chance(0.5) {
		g.vars["victim"] = victim.name
	}
	g.vars["Victim"] = capitalize(g.vars["victim"])
	g.say(stormCome...)
	g.say(stormDamage...)
	g.para()
	g.say(stormHelp...)
	g.say(stormWork...)
	g.say(stormEnd...)
}

// Plot: the hero breaks something, hides it, and owns up.
var (
	mistakeBorrow = tmpls(
		"$hero {borrowed|took} $friend's $thing without asking.",
		"$friend lent $hero $fhis $thing for one day. \"Please be careful with it,\" $fhe said.",
	)
	mistakeBreak = tmpls(
		"{While $he was playing $spot1|On the way home}, $hero dropped it, and the $thing broke.",
		"$hero {played too roughly|was not careful}, and {with a crack|suddenly} the $thing broke in two.",
	)
	mistakeHide = tmpls(
		"$hero was {scared|$bad}. $He hid the broken $thing {under $his bed|in a drawer|behind the door} and said nothing.",
		"\"Maybe nobody will notice,\" thought $hero, and $he {hid|put away} the pieces.",
	)
	mistakeGuilt = tmpls(
		"But that night $he could not sleep. $He kept thinking about $friend.",
		"The next day, $friend asked about the $thing, and $hero's {face turned red|stomach hurt}.",
	)
	mistakeConfess = tmpls(
		"At last $hero {took the pieces to $friend|told $friend the truth}. \"I am sorry,\" $he said. \"I broke your $thing.\"",
		"$hero {went to $friend|knocked on $friend's door} and said, \"I have to tell you something. I broke your $thing, and I am sorry.\"",
	)
	mistakeForgive = tmpls(
		"$friend was quiet for a moment. Then $fhe said, \"Thank you for telling me the truth.\" Together they {fixed|glued} the $thing.",
		"$friend was {sad|upset} at first, but then $fhe smiled. \"We can fix it together,\" $fhe said.",
	)
	mistakeEnd = tmpls(
		"$hero learned that telling the truth is hard, but hiding it is harder.",
		"After that, $hero always asked before {borrowing|taking} anything, and $he felt $feel to have such a good friend.",
	)
)

func plotMistake(g *gen) {
	g.say(mistakeBorrow...)
	g.say(mistakeBreak...)
	g.say(mistakeHide...)
	g.para()
	g.say(mistakeGuilt...)
	g.say(mistakeConfess...)
	g.say(mistakeForgive...)
	g.say(mistakeEnd...)
}

func init() { storyPlots = append(storyPlots, plotNewFriend, plotStorm, plotMistake) }
