package synth

// Word lists shared by the domains, written for this package.

var girlNames = []string{
	"Mia", "Lena", "Ava", "Nora", "Zoe", "Ella", "Ruby", "Lily", "Iris", "Maya", "Hana", "Sofia",
	"Clara", "Greta", "Alice", "Emma", "Julia", "Rosa", "Nina", "Tara", "Vera", "Leah", "Anya",
	"Elsa", "Ines", "Kira", "Lucy", "Mila", "Olga", "Paula", "Sara", "Tess", "Una", "Wren",
	"Yara", "Amara", "Bea", "Cora", "Dina", "Eva", "Fay", "Gina", "Hazel", "Ivy", "Jade",
	"Kate", "Luna", "Mona", "Nell", "Opal", "Pia", "Rita", "Selma", "Thea", "Uma", "Violet",
	"Willa", "Zara", "Alma", "Daisy", "Freya", "Greer", "Holly", "Isla", "June", "Kaya",
}

var boyNames = []string{
	"Tom", "Leo", "Sam", "Ben", "Max", "Omar", "Finn", "Hugo", "Jack", "Noah", "Eli", "Ravi",
	"Theo", "Felix", "Oscar", "Milo", "Arlo", "Jonas", "Kai", "Luca", "Marco", "Nico", "Otto",
	"Pablo", "Rafi", "Sven", "Tariq", "Umar", "Victor", "Wes", "Yusuf", "Zane", "Adam", "Bruno",
	"Caleb", "Dario", "Emil", "Frank", "Gus", "Henry", "Ivan", "Joel", "Karl", "Liam", "Mateo",
	"Ned", "Owen", "Peter", "Quinn", "Ross", "Simon", "Toby", "Ugo", "Vince", "Walt", "Xavi",
	"Yann", "Zeke", "Amir", "Basil", "Cyrus", "Dev", "Ezra", "Jude", "Kofi", "Lars",
}

var petNames = []string{
	"Pip", "Bramble", "Clover", "Dot", "Fern", "Hops", "Juniper", "Maple", "Nutmeg", "Pebble",
	"Poppy", "Sprout", "Thistle", "Tumble", "Whisk", "Acorn", "Biscuit", "Button", "Cocoa",
	"Dusty", "Flick", "Ginger", "Hazelnut", "Mossy", "Patch", "Pickle", "Rusty", "Sage",
	"Socks", "Tiny", "Twig", "Wobble",
}

// person kinds by pronoun.
var jobs = []string{"baker", "farmer", "teacher", "painter", "sailor", "doctor", "gardener", "shopkeeper", "librarian", "carpenter", "student", "musician", "potter", "weaver", "pilot",
	"tailor", "nurse", "builder", "cook", "miner", "shepherd", "beekeeper", "clockmaker", "blacksmith", "mail carrier", "scientist", "dancer", "writer", "bus driver", "firefighter", "inventor", "juggler"}
var girlKinds = append([]string{"girl", "little girl", "young woman", "old woman", "fisherwoman", "princess", "queen", "grandmother"}, jobs...)
var boyKinds = append([]string{"boy", "little boy", "young man", "old man", "fisherman", "prince", "king", "grandfather"}, jobs...)
var animalKinds = []string{"fox", "rabbit", "mouse", "bear", "owl", "duck", "turtle", "cat", "dog", "hedgehog", "squirrel", "frog", "goat", "badger", "otter", "goose", "beaver", "crow", "deer", "pony", "lamb", "raccoon", "mole", "sparrow",
	"kitten", "puppy", "wolf", "lion", "tiger", "elephant", "giraffe", "monkey", "penguin", "seal", "whale", "dolphin", "camel", "donkey", "pig", "cow", "chicken", "parrot", "bat", "lizard", "snail", "beetle"}

var traits = []string{
	"brave", "shy", "curious", "kind", "clever", "grumpy", "cheerful", "careful", "quiet", "proud",
	"clumsy", "patient", "restless", "gentle", "stubborn", "honest", "lazy", "busy", "silly",
	"thoughtful", "bold", "nervous", "friendly", "helpful", "sleepy", "lively", "wise", "young",
	"cautious", "generous", "playful", "serious", "forgetful", "hungry", "tidy", "messy", "loud",
	"polite", "daring", "dreamy", "eager", "fearless", "merry", "modest", "quick", "slow", "tall",
	"small", "strong", "tired", "warm-hearted", "careless", "jolly", "calm", "sharp-eyed",
}

var colors = []string{"red", "blue", "yellow", "green", "silver", "golden", "purple", "orange", "white", "black", "brown", "pink", "striped", "spotted", "tiny", "shiny", "wooden", "old", "soft", "heavy",
	"gray", "copper", "woolen", "painted", "little", "round", "square", "bright", "dusty", "brand-new", "lucky", "broken", "magic", "velvet", "glass", "tin"}

// things that can be lost, wanted, made or carried (singular).
var things = []string{
	"kite", "ball", "hat", "scarf", "key", "boat", "bell", "book", "box", "lantern", "cup", "ribbon",
	"shoe", "button", "marble", "whistle", "feather", "shell", "drum", "umbrella", "basket",
	"blanket", "jar", "coin", "map", "compass", "mitten", "spoon", "flute", "clock", "ring",
	"pencil", "notebook", "kettle", "bucket", "wagon", "bicycle", "sled", "candle", "brush",
	"necklace", "glove", "pebble", "stone", "toy train", "music box", "paper boat", "puppet",
	"sweater", "backpack", "hammer", "fishing rod", "watering can", "teapot", "mirror", "rope",
	"harmonica", "telescope", "paintbrush", "skateboard", "yo-yo", "lunch box", "pocket watch",
	"medal", "postcard", "sketchbook", "cap", "belt", "wheelbarrow", "birdcage", "pinwheel", "top",
	"flashlight", "violin", "trumpet", "crown", "ladle", "shovel", "bowl", "photo", "bracelet",
}

// foods for stories and word problems (plural forms).
var foods = []string{
	"apples", "pears", "plums", "cookies", "muffins", "carrots", "potatoes", "eggs", "oranges",
	"lemons", "cherries", "peaches", "tomatoes", "onions", "pies", "buns", "cupcakes", "pancakes",
	"berries", "nuts", "grapes", "bananas", "biscuits", "sandwiches",
}

var feelings = []string{"happy", "glad", "proud", "relieved", "surprised", "thankful", "excited", "calm", "joyful", "cheerful", "grateful", "delighted", "content", "hopeful"}
var badFeelings = []string{"sad", "worried", "upset", "afraid", "lonely", "tired", "angry", "confused", "gloomy", "nervous", "miserable", "restless", "unhappy", "cross"}

var timeOpeners = []string{
	"One morning", "Early one day", "On a sunny afternoon", "One rainy day", "Long ago",
	"One cold winter night", "At the start of spring", "One windy evening", "Last summer",
	"On the first day of autumn", "One foggy morning", "Once upon a time", "One quiet Sunday",
	"Late one afternoon", "On a hot day in July", "One snowy morning", "A long time ago",
	"One bright Monday", "On a stormy night", "In the middle of winter", "One warm evening in June",
	"On the last day of school", "Just before sunrise", "One gray Tuesday", "At the end of the harvest",
}

var weathers = []string{
	"the sky was clear and blue", "a soft rain was falling", "the wind was blowing hard",
	"snow covered the ground", "the sun was warm", "thick fog hid the hills", "the air smelled of rain",
	"dark clouds were moving in", "the leaves were turning gold", "it was very hot",
}

// place is a setting: where spots to search, sights and helpers come from.
type place struct {
	name     string   // "the village by the sea"
	in       string   // its preposition: "in", "on"
	spots    []string // "under the old pier"
	sights   []string // "boats rocked in the harbor"
	sounds   []string // "gulls cried"
	creature string   // an animal that lives there (singular)
}

var places = []place{
	{"the village by the sea", "in", []string{"under the old pier", "behind the fish market", "between the boats", "near the lighthouse", "on the sandy beach", "among the rocks"},
		[]string{"boats rocked in the harbor", "nets hung out to dry", "the lighthouse stood white against the sky", "children built castles in the sand"},
		[]string{"the gulls cried", "the waves crashed on the rocks", "a bell rang on a boat"}, "crab"},
	{"the deep forest", "in", []string{"under a fallen tree", "inside a hollow log", "near the mossy stones", "by the little stream", "behind a thorny bush", "at the foot of a tall oak"},
		[]string{"tall pines reached for the sky", "mushrooms grew in a ring", "sunlight fell through the leaves", "a narrow path wound between the trees"},
		[]string{"an owl hooted", "the leaves rustled", "a woodpecker tapped on a tree"}, "squirrel"},
	{"the busy city", "in", []string{"under a park bench", "behind the bus stop", "in the flower shop", "by the fountain", "near the train station", "on the steps of the library"},
		[]string{"buses rolled down the street", "people hurried to work", "tall buildings shone in the sun", "a man sold hot chestnuts on the corner"},
		[]string{"car horns honked", "a street musician played a violin", "the tram bell rang"}, "pigeon"},
	{"the old farm", "on", []string{"in the hay loft", "behind the barn", "under the tractor", "near the chicken coop", "by the water pump", "in the apple orchard"},
		[]string{"cows grazed in the meadow", "a red barn stood on the hill", "sunflowers grew along the fence", "the fields were full of wheat"},
		[]string{"a rooster crowed", "the sheep bleated", "the old windmill creaked"}, "hen"},
	{"the snowy mountain", "on", []string{"behind a big boulder", "inside a small cave", "near the frozen lake", "under the pine trees", "by the wooden cabin", "at the top of the ski slope"},
		[]string{"the peaks were white with snow", "icicles hung from the roofs", "a goat climbed the rocks", "smoke rose from the cabin chimney"},
		[]string{"the wind howled", "the snow crunched underfoot", "an eagle called from above"}, "goat"},
	{"the little town on the river", "in", []string{"under the stone bridge", "behind the bakery", "in the town square", "near the mill", "by the river bank", "on the church steps"},
		[]string{"the river flowed slowly past the houses", "a baker set out fresh bread", "ducks swam near the bridge", "flower boxes hung from every window"},
		[]string{"the church bell rang", "the mill wheel splashed", "children laughed in the square"}, "duck"},
	{"the castle on the hill", "in", []string{"in the great hall", "behind the tapestry", "at the top of the tower", "near the drawbridge", "in the royal kitchen", "under the stairs"},
		[]string{"flags waved on the towers", "knights practiced in the yard", "the moat shone in the sun", "the walls were made of gray stone"},
		[]string{"trumpets played", "the gate creaked open", "horses stamped in the stables"}, "raven"},
	{"the town around the old school", "in", []string{"under a desk", "in the library corner", "behind the gym", "near the art room", "by the playground slide", "in the lost and found box"},
		[]string{"children played in the yard", "drawings covered the walls", "the teacher wrote on the board", "a globe stood on the shelf"},
		[]string{"the school bell rang", "chalk squeaked on the board", "someone was practicing the piano"}, "hamster"},
	{"the garden behind the house", "in", []string{"under the rose bush", "behind the shed", "in the vegetable patch", "near the pond", "by the old swing", "inside the flower pot"},
		[]string{"bees buzzed around the flowers", "tomatoes ripened on the vine", "a bird bath stood in the middle", "the grass was wet with dew"},
		[]string{"the birds sang", "the wind chimes rang", "a frog croaked by the pond"}, "snail"},
	{"the market town", "in", []string{"under a fruit stall", "behind the cheese seller", "near the flower cart", "by the bread stand", "between two crates", "next to the fish stall"},
		[]string{"stalls were full of fruit and vegetables", "a woman sold warm bread", "baskets of flowers lined the path", "people carried heavy bags"},
		[]string{"sellers called out their prices", "coins clinked", "a dog barked at the fish seller"}, "cat"},
	{"the island", "on", []string{"under a palm tree", "inside a sea cave", "near the old shipwreck", "by the rock pools", "on the white beach", "behind the fishing hut"},
		[]string{"palm trees swayed in the breeze", "the water was clear and green", "bright fish swam near the shore", "a small boat was tied to the dock"},
		[]string{"the waves whispered", "parrots squawked", "the palm leaves rattled"}, "turtle"},
	{"the desert town", "in", []string{"behind the water well", "under a cactus", "in the shade of the wall", "near the old mine", "by the market gate", "on the dusty road"},
		[]string{"the sand glowed orange in the sun", "camels rested by the well", "the houses were made of clay", "a dry wind blew across the road"},
		[]string{"a camel grunted", "the wind hissed over the dunes", "a bell rang at the gate"}, "lizard"},
	{"the harbor town", "in", []string{"on the busy dock", "behind a pile of crates", "in the sail maker's shop", "near the big crane", "under a rowboat", "by the harbor wall"},
		[]string{"ships unloaded their cargo", "sailors mended their sails", "crates were stacked high", "the water smelled of salt"},
		[]string{"ropes creaked", "a ship's horn sounded", "the sailors sang"}, "seal"},
	{"the meadow by the lake", "in", []string{"in the tall grass", "under the willow tree", "near the reeds", "by the wooden jetty", "behind the big rock", "among the wild flowers"},
		[]string{"the lake was smooth as glass", "butterflies danced over the flowers", "a heron stood in the shallow water", "the grass moved like waves"},
		[]string{"the frogs sang", "the reeds whispered", "a fish jumped out of the water"}, "frog"},
}

var morePlaces = []place{
	{"the windmill village", "in", []string{"behind the windmill", "in the flour store", "near the canal", "under the wooden bridge", "by the tulip field", "on the dike"},
		[]string{"the windmill sails turned slowly", "tulips grew in long bright rows", "boats drifted along the canal", "the fields were flat and green"},
		[]string{"the sails creaked", "the canal water lapped", "cows mooed in the distance"}, "stork"},
	{"the train station", "in", []string{"under a bench on the platform", "behind the ticket office", "near the clock", "by the luggage cart", "in the waiting room", "next to the newspaper stand"},
		[]string{"trains came and went all day", "travelers carried big suitcases", "the great clock hung over the platform", "steam rose from an old engine"},
		[]string{"a whistle blew", "the loudspeaker called out the trains", "wheels clattered on the rails"}, "pigeon"},
	{"the zoo", "in", []string{"behind the elephant house", "near the penguin pool", "under the picnic table", "by the ice cream cart", "in the reptile house", "next to the big gate"},
		[]string{"giraffes reached for the high leaves", "children pressed their noses to the glass", "the keepers carried buckets of fish", "a map showed every path"},
		[]string{"the lions roared", "the monkeys chattered", "the sea lions barked"}, "peacock"},
	{"the little bakery street", "on", []string{"behind the bakery", "under the striped awning", "near the bread ovens", "by the flour sacks", "in the back yard", "on the front step"},
		[]string{"the smell of fresh bread filled the air", "cakes stood in the window", "people waited in a long line", "the baker's cart was painted blue"},
		[]string{"the oven door banged", "the shop bell jingled", "someone whistled a tune"}, "mouse"},
	{"the valley of orchards", "in", []string{"under the oldest pear tree", "behind the cider press", "near the beehives", "by the stone wall", "in the tall grass", "on the cart path"},
		[]string{"the trees were heavy with fruit", "ladders leaned against the branches", "baskets of plums stood in the shade", "the hills rose on both sides"},
		[]string{"the bees hummed", "a cart rattled by", "the pickers sang as they worked"}, "hedgehog"},
	{"the space station", "on", []string{"in the storage room", "behind the control panel", "near the big window", "by the greenhouse pods", "in the sleeping cabins", "under the kitchen table"},
		[]string{"the Earth turned slowly outside the window", "everything floated if it was not tied down", "lights blinked on every panel", "the stars never stopped shining"},
		[]string{"the air fans hummed", "a computer beeped", "the radio crackled"}, "hamster"},
}

func init() { places = append(places, morePlaces...) }
