package synth

import (
	"fmt"
	"strings"
)

// Technical prose: documentation of made-up systems. Each system kind has parts with roles,
// settings with units and ranges, procedures, faults, and a throughput that the text works
// out with real arithmetic; a document picks a name and a selection of sections.

type part struct{ name, role string } // role: third-person verb phrase ("stores each job")

type setting struct {
	name, what, unit string
	lo, hi           int
	more             string // effect of a larger value
}

type procedure struct {
	task  string   // "add a new worker"
	steps []string // imperative sentences
}

type fault struct{ symptom, cause, fix string }

type system struct {
	kind, category, purpose string
	item, items             string // what flows through it
	place                   string // where it is used
	parts                   []part
	settings                []setting
	procs                   []procedure
	faults                  []fault
	worker, workers, rate   string // throughput: N workers × R items per <rate>
	pipeline                bool   // items pass through the parts in order
}

var systemNames = []string{
	"Aster", "Borealis", "Cinder", "Delta", "Ember", "Fjord", "Granite", "Helix", "Iris", "Juniper",
	"Kestrel", "Lumen", "Meridian", "Nimbus", "Onyx", "Pioneer", "Quartz", "Raven", "Sable", "Tundra",
	"Umber", "Vertex", "Willow", "Zephyr", "Atlas", "Beacon", "Cobalt", "Drift", "Echo", "Falcon",
	"Glacier", "Harbor", "Indigo", "Jasper", "Krypton", "Lotus", "Mosaic", "Nova", "Orbit", "Prism",
}

var systems = []system{
	{pipeline: true, kind: "scheduler", category: "software service", purpose: "decides which worker runs each job", item: "job", items: "jobs", place: "in data centers and build farms",
		parts:    []part{{"queue", "holds each job until a worker is free"}, {"dispatcher", "chooses the next job and sends it to a worker"}, {"worker pool", "runs the jobs and reports when each one is done"}, {"monitor", "records how long every job takes"}, {"retry table", "remembers which jobs failed and when to try them again"}},
		settings: []setting{{"queue_size", "the number of jobs the queue can hold", "jobs", 16, 4096, "let more jobs wait but use more memory"}, {"max_workers", "how many workers may run at once", "workers", 2, 256, "finish more jobs at once but load the machines more"}, {"retry_limit", "how many times a failed job is tried again", "tries", 1, 10, "recover from more errors but can hide real bugs"}},
		procs:    []procedure{{"add a new worker", []string{"Install the worker program on the new machine.", "Give the machine a name in the worker list.", "Restart the dispatcher so that it reads the list again.", "Check the monitor to see that the new worker takes jobs."}}, {"drain the queue before maintenance", []string{"Stop accepting new jobs.", "Wait until the queue is empty.", "Let the running jobs finish.", "Shut down the workers one by one."}}},
		faults:   []fault{{"jobs wait in the queue for a long time", "every worker is busy", "add workers or raise max_workers"}, {"the same job runs twice", "a worker stopped before it reported the result", "make the job safe to repeat"}, {"the queue rejects new jobs", "queue_size is too small for the load", "raise queue_size or add workers"}},
		worker:   "worker", workers: "workers", rate: "minute"},
	{pipeline: true, kind: "message broker", category: "software service", purpose: "carries messages from the programs that send them to the programs that read them", item: "message", items: "messages", place: "between the parts of large applications",
		parts:    []part{{"producer", "writes new messages to a topic"}, {"topic", "keeps the messages in the order they arrived"}, {"partition", "holds one slice of a topic on one disk"}, {"consumer", "reads the messages and marks how far it has read"}, {"offset store", "remembers the position of every consumer"}},
		settings: []setting{{"retention_hours", "how long messages are kept", "hours", 1, 720, "keep history longer but fill the disks faster"}, {"partitions", "how many slices each topic is split into", "partitions", 1, 64, "allow more consumers to read in parallel"}, {"batch_size", "how many messages a producer sends at once", "messages", 1, 1000, "raise throughput but add delay"}},
		procs:    []procedure{{"create a topic", []string{"Choose a name for the topic.", "Decide how many partitions it needs.", "Run the create command with the name and the number of partitions.", "Send a test message and read it back."}}, {"replace a failed disk", []string{"Move the partitions on that disk to other disks.", "Take the disk out of the machine.", "Install the new disk.", "Move the partitions back."}}},
		faults:   []fault{{"consumers fall behind", "there are fewer partitions than consumers", "add partitions to the topic"}, {"messages arrive out of order", "they were written to different partitions", "use the same key for messages that must stay in order"}, {"the disk fills up", "retention_hours is too long", "shorten the retention or add disks"}},
		worker:   "partition", workers: "partitions", rate: "second"},
	{pipeline: true, kind: "cache", category: "storage layer", purpose: "keeps recent answers close at hand so that slow lookups are not repeated", item: "request", items: "requests", place: "in front of databases and web services",
		parts:    []part{{"key index", "finds the stored answer for a request"}, {"memory pool", "holds the stored answers"}, {"eviction list", "decides which answer to remove when memory is full"}, {"loader", "fetches an answer from the slow store when the cache does not have it"}},
		settings: []setting{{"capacity_mb", "how much memory the cache may use", "megabytes", 64, 8192, "keep more answers and raise the hit rate"}, {"ttl_seconds", "how long an answer stays valid", "seconds", 5, 3600, "save more lookups but may serve stale answers"}, {"shards", "how many independent parts the memory is split into", "shards", 1, 128, "reduce waiting between threads"}},
		procs:    []procedure{{"warm the cache after a restart", []string{"Load the list of the most requested keys.", "Ask the loader to fetch each of them.", "Watch the hit rate until it is back to normal."}}, {"clear one key", []string{"Find the key in the index.", "Remove its answer from the memory pool.", "Let the next request load a fresh answer."}}},
		faults:   []fault{{"the hit rate drops", "the cache is too small for the working set", "raise capacity_mb"}, {"users see old data", "ttl_seconds is too long", "shorten ttl_seconds or clear the changed keys"}, {"the loader is overloaded after a restart", "every request misses at once", "warm the cache before sending traffic"}},
		worker:   "shard", workers: "shards", rate: "second"},
	{kind: "water pump", category: "machine", purpose: "moves water from a well to a tank on the roof", item: "liter", items: "liters", place: "in farms and small buildings",
		parts:    []part{{"motor", "turns the shaft"}, {"impeller", "spins and pushes the water upward"}, {"pressure switch", "turns the motor on when the tank is low"}, {"check valve", "stops the water from flowing back down"}, {"strainer", "keeps sand and leaves out of the pump"}},
		settings: []setting{{"cut_in_pressure", "the pressure at which the pump starts", "kilopascals", 100, 400, "keep the tank fuller but start the motor more often"}, {"cut_out_pressure", "the pressure at which the pump stops", "kilopascals", 200, 600, "raise the water pressure in the taps"}, {"run_timeout", "the longest time the motor may run without a break", "minutes", 5, 60, "allow bigger fills but risk overheating"}},
		procs:    []procedure{{"clean the strainer", []string{"Turn off the power to the pump.", "Close the valve on the inlet pipe.", "Unscrew the strainer cover.", "Rinse the strainer in clean water.", "Put it back and open the valve."}}, {"prime the pump", []string{"Fill the pump body with water.", "Close the priming plug.", "Turn on the power.", "Wait until water flows steadily."}}},
		faults:   []fault{{"the motor runs but no water comes out", "the pump has lost its prime", "prime the pump again"}, {"the pump starts and stops every few seconds", "the pressure tank has lost its air", "refill the tank with air"}, {"the flow is weak", "the strainer is blocked", "clean the strainer"}},
		worker:   "pump", workers: "pumps", rate: "minute"},
	{kind: "greenhouse controller", category: "control system", purpose: "keeps the temperature and the soil moisture inside a greenhouse at their targets", item: "reading", items: "readings", place: "in greenhouses and plant nurseries",
		parts:    []part{{"sensor board", "measures the air temperature and the soil moisture"}, {"control unit", "compares the readings with the targets"}, {"vent motor", "opens the roof windows when it is too warm"}, {"drip valve", "lets water into the beds when the soil is dry"}, {"display", "shows the current readings and alarms"}},
		settings: []setting{{"target_temp", "the temperature the controller aims for", "degrees", 12, 35, "suit warm crops but use more heating"}, {"moisture_low", "the moisture level that starts watering", "percent", 10, 60, "keep the soil wetter"}, {"sample_interval", "the time between two readings", "seconds", 5, 600, "save power but react more slowly"}},
		procs:    []procedure{{"calibrate a moisture sensor", []string{"Dry the sensor and note its reading.", "Put it in a cup of water and note the reading again.", "Enter both values in the settings menu.", "Push the sensor back into the soil."}}, {"set up a new bed", []string{"Lay the drip line along the bed.", "Connect it to a free valve.", "Place a sensor in the middle of the bed.", "Give the bed a name on the display."}}},
		faults:   []fault{{"the vents never open", "the vent motor has lost power", "check the fuse of the motor"}, {"one bed is always flooded", "its drip valve is stuck open", "clean or replace the valve"}, {"the readings jump up and down", "a sensor cable is loose", "tighten the cable and check the plug"}},
		worker:   "sensor", workers: "sensors", rate: "hour"},
	{pipeline: true, kind: "file sync tool", category: "software tool", purpose: "keeps the same files on several computers", item: "file", items: "files", place: "in offices and at home",
		parts:    []part{{"scanner", "walks through the folders and notes every change"}, {"hasher", "computes a short fingerprint of each file"}, {"transfer engine", "copies the changed parts to the other computers"}, {"conflict checker", "notices when the same file changed in two places"}, {"journal", "keeps a list of every change that was sent"}},
		settings: []setting{{"scan_interval", "how often the folders are scanned", "seconds", 10, 3600, "save work but notice changes later"}, {"chunk_kb", "the size of the pieces files are split into", "kilobytes", 64, 4096, "send big files faster but resend more after a small change"}, {"max_uploads", "how many files are sent at once", "files", 1, 32, "finish sooner on a fast network"}},
		procs:    []procedure{{"add a new computer", []string{"Install the tool on the new computer.", "Enter the code shown on an existing computer.", "Choose the folders to share.", "Wait for the first full copy to finish."}}, {"restore an old version of a file", []string{"Open the journal.", "Find the file and the date you need.", "Choose restore.", "Check the file before you edit it."}}},
		faults:   []fault{{"a file appears twice with a new name", "it changed on two computers at once", "keep the right copy and delete the other"}, {"sync is very slow", "max_uploads is too low for the network", "raise max_uploads"}, {"changes are not noticed", "scan_interval is too long", "shorten scan_interval"}},
		worker:   "upload slot", workers: "upload slots", rate: "minute"},
	{kind: "solar battery pack", category: "power system", purpose: "stores energy from solar panels for use at night", item: "watt-hour", items: "watt-hours", place: "in cabins, boats and small homes",
		parts:    []part{{"cell module", "stores the energy in many small cells"}, {"charge controller", "takes power from the panels and charges the cells safely"}, {"inverter", "turns the stored power into household current"}, {"battery monitor", "tracks how full the pack is"}, {"cooling fan", "keeps the cells from getting too hot"}},
		settings: []setting{{"max_charge_percent", "the highest level the cells are charged to", "percent", 50, 100, "store more energy but age the cells faster"}, {"low_cutoff_percent", "the level at which the pack stops giving power", "percent", 5, 40, "protect the cells but leave less energy to use"}, {"fan_start_temp", "the temperature at which the fan turns on", "degrees", 25, 60, "make less noise but let the cells run warmer"}},
		procs:    []procedure{{"add a second pack", []string{"Turn off the inverter.", "Connect the new pack to the same bus with thick cables.", "Tell the battery monitor about the new pack.", "Turn the inverter back on and check both packs charge."}}, {"store the pack for the winter", []string{"Charge the pack to about half.", "Turn off the inverter and the controller.", "Keep the pack in a dry, cool place.", "Check the charge once a month."}}},
		faults:   []fault{{"the pack empties too quickly", "some cells have aged", "test each module and replace the weak one"}, {"the inverter shuts off under load", "the load is larger than the inverter can give", "turn off some devices or use a larger inverter"}, {"the fan runs all the time", "fan_start_temp is set too low", "raise fan_start_temp"}},
		worker:   "module", workers: "modules", rate: "hour"},
	{pipeline: true, kind: "compiler", category: "software tool", purpose: "turns source code into a program the machine can run", item: "line of code", items: "lines of code", place: "on the computers of programmers",
		parts:    []part{{"lexer", "splits the source text into tokens"}, {"parser", "builds a tree from the tokens"}, {"type checker", "makes sure every value is used the right way"}, {"optimizer", "removes work that the program does not need"}, {"code generator", "writes the machine instructions"}},
		settings: []setting{{"opt_level", "how hard the optimizer works", "levels", 0, 3, "produce faster programs but compile more slowly"}, {"jobs", "how many files are compiled at once", "jobs", 1, 64, "finish a large build sooner"}, {"max_errors", "how many errors are shown before stopping", "errors", 1, 100, "show more problems at once"}},
		procs:    []procedure{{"build a program", []string{"Write the source files.", "Run the compiler on the main file.", "Read any errors and fix them.", "Run the compiler again until it succeeds."}}, {"find why a build is slow", []string{"Turn on the timing report.", "Build the program once.", "Look for the files that take the longest.", "Split the largest of them into smaller files."}}},
		faults:   []fault{{"the build stops with a type error", "a value is used as the wrong type", "read the line named in the error and fix the value"}, {"the build takes a long time", "opt_level is high for every file", "use a lower level while developing"}, {"the program is larger than expected", "debug information is included", "build in release mode"}},
		worker:   "build job", workers: "build jobs", rate: "second"},
	{kind: "irrigation system", category: "control system", purpose: "waters fields on a schedule and only when the soil needs it", item: "liter", items: "liters", place: "on farms and in parks",
		parts:    []part{{"main valve", "lets water from the supply into the pipes"}, {"zone valve", "opens the pipes of one field at a time"}, {"rain sensor", "tells the system when it has rained"}, {"timer", "starts each zone at its set hour"}, {"flow meter", "counts how much water passes"}},
		settings: []setting{{"zone_minutes", "how long each zone is watered", "minutes", 5, 120, "give the plants more water"}, {"start_hour", "the hour at which watering begins", "o'clock", 1, 23, "move watering to another time of day"}, {"rain_skip_days", "how many days watering pauses after rain", "days", 0, 7, "save more water after rain"}},
		procs:    []procedure{{"add a new zone", []string{"Lay the pipe to the new field.", "Fit a zone valve where the pipe meets the main line.", "Wire the valve to a free terminal of the timer.", "Set the minutes for the new zone."}}, {"check for leaks", []string{"Close every zone valve.", "Open the main valve.", "Read the flow meter twice, ten minutes apart.", "If the number changed, walk the pipes to find the leak."}}},
		faults:   []fault{{"one zone stays dry", "its valve does not open", "check the valve wire and its terminal"}, {"the fields are flooded after rain", "the rain sensor is not connected", "connect the sensor and test it with water"}, {"the water bill is high", "a pipe is leaking", "check for leaks with the flow meter"}},
		worker:   "zone", workers: "zones", rate: "minute"},
	{pipeline: true, kind: "search index", category: "software service", purpose: "finds the documents that contain the words a user asks for", item: "query", items: "queries", place: "behind the search boxes of websites",
		parts:    []part{{"tokenizer", "breaks each document into words"}, {"inverted list", "stores, for every word, the documents that contain it"}, {"ranker", "orders the matching documents by how well they fit"}, {"query parser", "turns the user's text into a search"}, {"merger", "combines small index segments into larger ones"}},
		settings: []setting{{"max_results", "how many documents a search returns", "documents", 5, 500, "show more results but answer more slowly"}, {"segment_mb", "the size at which segments are merged", "megabytes", 8, 1024, "merge less often but use more memory"}, {"replicas", "how many copies of the index serve searches", "copies", 1, 12, "answer more searches at once"}},
		procs:    []procedure{{"add new documents", []string{"Send the documents to the indexing endpoint.", "Wait for the tokenizer to process them.", "Refresh the index so that searches can see them.", "Search for a word from a new document to check."}}, {"rebuild the index", []string{"Create an empty index beside the old one.", "Load every document into it.", "Switch searches to the new index.", "Delete the old index."}}},
		faults:   []fault{{"new documents do not show up", "the index has not been refreshed", "refresh the index"}, {"searches are slow", "there are too many small segments", "let the merger run or lower segment_mb"}, {"the best document is not on top", "the ranker weights are wrong", "adjust the weights and test again"}},
		worker:   "replica", workers: "replicas", rate: "second"},
	{kind: "elevator controller", category: "control system", purpose: "decides which car answers each call and in what order it stops", item: "passenger", items: "passengers", place: "in office and apartment buildings",
		parts:    []part{{"call panel", "tells the controller where people are waiting"}, {"car selector", "picks the car that can arrive soonest"}, {"door unit", "opens and closes the doors safely"}, {"load sensor", "weighs the people in a car"}, {"floor counter", "knows where each car is"}},
		settings: []setting{{"door_hold_seconds", "how long the doors stay open", "seconds", 2, 20, "give people more time to enter"}, {"max_load_kg", "the heaviest load a car may carry", "kilograms", 300, 2000, "let more people ride at once"}, {"idle_floor", "the floor an empty car returns to", "floor", 0, 40, "shorten the wait on that floor"}},
		procs:    []procedure{{"take a car out of service", []string{"Turn the key in the car to service mode.", "Wait until the car has no passengers.", "Send it to the lowest floor.", "Lock the doors open for the technician."}}, {"test the door sensor", []string{"Open the doors.", "Hold an object in the doorway.", "Press the close button.", "Check that the doors open again."}}},
		faults:   []fault{{"people wait a long time in the lobby", "idle_floor is far from the lobby", "set idle_floor to the lobby"}, {"the doors close too soon", "door_hold_seconds is too low", "raise door_hold_seconds"}, {"a car refuses to move", "the load sensor reports too much weight", "check and calibrate the load sensor"}},
		worker:   "car", workers: "cars", rate: "hour"},
	{kind: "bread oven", category: "machine", purpose: "bakes many loaves evenly at the same time", item: "loaf", items: "loaves", place: "in bakeries and school kitchens",
		parts:    []part{{"heating coil", "warms the air inside the oven"}, {"fan", "moves the hot air so that every shelf bakes evenly"}, {"steam jet", "puts water vapor into the oven for a crisp crust"}, {"thermostat", "keeps the temperature at the set point"}, {"rack trolley", "carries the trays in and out"}},
		settings: []setting{{"bake_temp", "the baking temperature", "degrees", 150, 260, "bake faster and darken the crust"}, {"bake_minutes", "the baking time", "minutes", 10, 90, "dry the loaves more"}, {"steam_seconds", "how long steam is added at the start", "seconds", 0, 30, "give a thinner, crisper crust"}},
		procs:    []procedure{{"clean the oven", []string{"Let the oven cool down completely.", "Take out the racks.", "Brush the crumbs from the floor.", "Wipe the glass and the walls with a damp cloth."}}, {"bake a test batch", []string{"Heat the oven to the set temperature.", "Put one tray on each shelf.", "Bake for the usual time.", "Compare the color of the loaves on each shelf."}}},
		faults:   []fault{{"the loaves on the top shelf burn", "the fan is not turning", "check the fan motor"}, {"the crust is soft", "no steam was added", "clean the steam jet and raise steam_seconds"}, {"the oven takes too long to heat", "a heating coil has failed", "test each coil and replace the broken one"}},
		worker:   "shelf", workers: "shelves", rate: "hour"},
	{kind: "weather station", category: "measuring device", purpose: "measures the weather and sends the readings to a central server", item: "reading", items: "readings", place: "on hills, roofs and airfields",
		parts:    []part{{"thermometer", "measures the air temperature"}, {"rain gauge", "counts how much rain falls"}, {"wind vane", "shows where the wind comes from"}, {"anemometer", "measures the wind speed"}, {"radio link", "sends the readings to the server"}},
		settings: []setting{{"report_minutes", "how often the readings are sent", "minutes", 1, 60, "save battery but give fewer readings"}, {"gauge_ml", "how much water tips the rain gauge once", "milliliters", 1, 20, "measure heavy rain more roughly"}, {"gust_window", "the time over which a gust is measured", "seconds", 1, 10, "smooth out short gusts"}},
		procs:    []procedure{{"replace the battery", []string{"Open the cover of the electronics box.", "Note the time of the last reading.", "Swap the battery.", "Check that a new reading reaches the server."}}, {"clean the rain gauge", []string{"Lift off the funnel.", "Remove leaves and dirt.", "Check that the bucket tips freely.", "Put the funnel back."}}},
		faults:   []fault{{"no readings arrive", "the radio link has lost its signal", "check the antenna and the battery"}, {"the rain total stays at zero", "the gauge is blocked", "clean the rain gauge"}, {"the wind speed is always low", "the anemometer is stiff", "clean and oil its bearing"}},
		worker:   "station", workers: "stations", rate: "hour"},
	{pipeline: true, kind: "package sorter", category: "machine", purpose: "reads the label on each package and sends it to the right chute", item: "package", items: "packages", place: "in post offices and warehouses",
		parts:    []part{{"conveyor belt", "carries the packages past the scanner"}, {"label scanner", "reads the address code on each package"}, {"diverter arm", "pushes each package into its chute"}, {"reject bin", "collects packages whose label cannot be read"}, {"counter", "counts the packages sent to each chute"}},
		settings: []setting{{"belt_speed", "how fast the belt moves", "centimeters per second", 20, 300, "sort more packages but make more reading errors"}, {"chutes", "how many destinations the sorter serves", "chutes", 4, 96, "serve more routes"}, {"scan_retries", "how often a bad label is read again", "tries", 0, 5, "send fewer packages to the reject bin"}},
		procs:    []procedure{{"clear a jam", []string{"Press the emergency stop.", "Find the package that is stuck.", "Remove it by hand and put it in the reject bin.", "Restart the belt at low speed."}}, {"add a new destination", []string{"Choose a free chute.", "Enter the address codes for the new route.", "Put a label with the route name on the chute.", "Send a test package through."}}},
		faults:   []fault{{"many packages land in the reject bin", "the scanner window is dirty", "clean the scanner window"}, {"packages fall off the belt", "belt_speed is too high", "lower belt_speed"}, {"a chute gets the wrong packages", "its address codes are wrong", "check the codes for that chute"}},
		worker:   "belt", workers: "belts", rate: "hour"},
}

var (
	techTitle = tmpls(
		"# The $Name $kind",
		"$Name $Kind: an overview",
		"# How the $Name $kind works",
		"## $Name $kind, version $version",
		"Notes on the $Name $kind",
	)
	techDefine = tmpls(
		"The $Name $kind is a $category that $purpose.",
		"{This document describes|This page explains|Here we describe} the $Name $kind, a $category that $purpose.",
		"What is the $Name $kind? It is a $category that $purpose.",
		"Meet the $Name $kind: a $category that $purpose.",
		"$Name is a $kind: a $category that $purpose.",
		"$aKind is a $category that $purpose, and $Name is {one such $kind|a simple example}.",
		"{In short|Put simply}, the $Name $kind $purpose.",
	)
	techWhere = tmpls(
		"It is {used|found} $place.",
		"Systems {like it|of this kind} are {common|used} $place.",
		"{It was designed|It was built} for use $place.",
	)
	techPartsIntro = tmpls(
		"It has $n main parts: $partlist.",
		"The $kind {is made of|consists of} $n parts: $partlist.",
		"{Inside|At its core}, there are $n parts: $partlist.",
	)
	techPart = tmpls(
		"The $part $role.",
		"{As its name suggests|In simple terms}, the $part $role.",
		"{Without the $part, the $kind could not work, because it|The $part matters because it} $role.",
		"The $part is the part that $role.",
		"{Next|Then}, the $part $role.",
		"{Another part,|One more part,} the $part, $role.",
	)
	techFlowFirst = tmpls(
		"When a new $item arrives, the $part1 {takes|receives} it first.",
		"Every $item {starts|begins} at the $part1.",
	)
	techFlowNext = tmpls(
		"{After that|Then|Next}, the $part2 {handles|takes over}: it $role2.",
		"The $part2 then $role2.",
	)
	techFlowLast = tmpls(
		"Finally, the $part3 $role3.",
		"{In the end|Last}, the $part3 $role3.",
	)
	techSetting = tmpls(
		"The `$sname` setting {controls|sets} $what. {Its default value is|By default it is} $value $unit; larger values $more.",
		"`$sname` is $what. It {can range|ranges} from $lo to $hi $unit, and the default is $value.",
		"- `$sname` (default $value $unit): $what. Larger values $more.",
	)
	techProcIntro = tmpls(
		"## How to $task",
		"To $task, follow these steps:",
		"{Procedure|Steps}: $task",
	)
	techFault = tmpls(
		"{A common problem|One common fault} is that $symptom. {This happens when|The usual reason is that} $cause, {and the remedy is to|so} $fix.",
		"If $symptom, {the cause is usually that|check whether} $cause. {To fix it,|The fix is to} $fix.",
		"Problem: $symptom. Cause: $cause. Solution: $fix.",
		"When $symptom, it {usually|often} means that $cause; $fix.",
	)
	techExample = tmpls(
		"For example, if each $worker handles $r $items per $rate and there are $k $workers, the $kind can handle $r * $k = $total $items per $rate.",
		"With $k $workers at $r $items per $rate each, the total is $r * $k = $total $items per $rate.",
		"One $worker handles about $r $items per $rate. {So|Therefore}, $k $workers handle $r * $k = $total $items per $rate.",
	)
	techExampleMore = tmpls(
		"Over $h {$rate}s, that {adds up to|makes} $total * $h = $grand $items.",
		"In $h {$rate}s it handles $total * $h = $grand $items.",
	)
	techFAQ = tmpls(
		"Q: What does the $part do?\nA: The $part $role.",
		"Q: What is the $Name $kind?\nA: It is a $category that $purpose.",
		"Q: What does `$sname` control?\nA: It controls $what.",
		"Q: What should I do if $symptom?\nA: {Usually|Most often}, $cause, so $fix.",
	)
)

func (g *gen) setSystem() system {
	s := oneOf(g, systems)
	v := g.vars
	v["Name"] = g.pick(systemNames)
	v["kind"], v["Kind"], v["category"], v["purpose"] = s.kind, capitalize(s.kind), s.category, s.purpose
	v["aKind"] = withArticle(s.kind)
	v["place"], v["item"], v["items"] = s.place, s.item, s.items
	v["worker"], v["workers"], v["rate"] = s.worker, s.workers, s.rate
	v["version"] = fmt.Sprintf("%d.%d", g.between(1, 9), g.between(0, 12))
	return s
}

func (g *gen) setPart(p part, i string) {
	g.vars["part"+i], g.vars["role"+i] = p.name, p.role
}

func (g *gen) setSetting(st setting) {
	v := g.vars
	v["sname"], v["what"], v["unit"], v["more"] = st.name, st.what, st.unit, st.more
	v["lo"], v["hi"] = fmt.Sprint(st.lo), fmt.Sprint(st.hi)
	v["value"] = fmt.Sprint(g.between(st.lo, st.hi))
}

func (g *gen) setFault(f fault) {
	g.vars["symptom"], g.vars["cause"], g.vars["fix"] = f.symptom, f.cause, f.fix
}

func makeTechnical(g *gen) string {
	g.technicalText()
	return g.b.String()
}

func (g *gen) technicalText() {
	s := g.setSystem()
	v := g.vars
	if g.chance(0.7) {
		g.say(techTitle...)
		g.b.WriteString("\n\n")
	}
	g.say(techDefine...)
	g.cut()
	g.say(techWhere...)

	parts := pickOrdered(g, s.parts, g.between(3, min(5, len(s.parts))))
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = "the " + p.name
	}
	v["n"], v["partlist"] = numberWord(len(parts)), list(names)
	g.say(techPartsIntro...)
	g.para()
	if g.chance(0.5) || !s.pipeline { // parts one by one
		for _, p := range parts {
			g.setPart(p, "")
			g.say(techPart...)
		}
	} else if s.pipeline { // the path of one item
		g.setPart(parts[0], "1")
		g.setPart(parts[1], "2")
		g.setPart(parts[2], "3")
		g.say(techFlowFirst...)
		g.say(techFlowNext...)
		g.say(techFlowLast...)
	}
	if g.chance(0.6) {
		g.para()
		r, k := g.between(2, 60), g.between(2, 24)
		v["r"], v["k"], v["total"] = fmt.Sprint(r), fmt.Sprint(k), fmt.Sprint(r*k)
		g.say(techExample...)
		if h := g.between(2, 12); r*k*h <= 9999 && g.chance(0.4) {
			v["h"], v["grand"] = fmt.Sprint(h), fmt.Sprint(r*k*h)
			g.say(techExampleMore...)
		}
	}

	sections := g.r.Perm(3)
	for _, sec := range sections[:g.between(1, 3)] {
		g.para()
		switch sec {
		case 0:
			if g.chance(0.5) {
				g.b.WriteString("## Settings\n\n")
			}
			sts := pickN(g, s.settings, g.between(1, len(s.settings)))
			for i, st := range sts {
				g.setSetting(st)
				if i > 0 {
					g.b.WriteString("\n")
				}
				g.say(techSetting...)
			}
		case 1:
			p := oneOf(g, s.procs)
			v["task"] = p.task
			g.say(techProcIntro...)
			for i, step := range p.steps {
				fmt.Fprintf(&g.b, "\n%d. %s", i+1, step)
			}
		case 2:
			if g.chance(0.5) {
				g.b.WriteString("## Troubleshooting\n\n")
			}
			for i, f := range pickN(g, s.faults, g.between(1, 2)) {
				g.setFault(f)
				if i > 0 {
					g.b.WriteString("\n")
				}
				g.say(techFault...)
			}
		}
	}
	if g.chance(0.35) {
		g.para()
		g.setPart(oneOf(g, s.parts), "")
		g.setSetting(oneOf(g, s.settings))
		g.setFault(oneOf(g, s.faults))
		g.say(techFAQ...)
	}
}

// technicalPrompt is either a document's opening or a question in the documents' Q/A form.
func technicalPrompt(g *gen) Prompt {
	if g.chance(0.5) {
		g.technicalText()
		p := g.promptAtCut()
		p.Prompt = strings.TrimRight(p.Prompt, " ")
		return p
	}
	s := g.setSystem()
	g.setPart(oneOf(g, s.parts), "")
	g.setSetting(oneOf(g, s.settings))
	g.setFault(oneOf(g, s.faults))
	qa := g.text(oneOf(g, techFAQ))
	i := strings.Index(qa, "\nA:") + len("\nA:")
	return Prompt{Prompt: qa[:i], Reference: qa[i:]}
}

func numberWord(n int) string {
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	if n >= 0 && n < len(words) {
		return words[n]
	}
	return fmt.Sprint(n)
}

var moreSystems = []system{
	{pipeline: true, kind: "backup service", category: "software service", purpose: "copies important files to a safe place every night", item: "file", items: "files", place: "in offices, schools and hospitals",
		parts:    []part{{"file walker", "lists the files that changed since the last backup"}, {"compressor", "packs the files into smaller archives"}, {"encryptor", "locks each archive with a secret key"}, {"uploader", "sends the archives to the remote store"}, {"catalog", "records which version of each file is in which archive"}},
		settings: []setting{{"keep_days", "how many days old backups are kept", "days", 7, 365, "let you go further back in time but use more space"}, {"start_hour", "the hour at which the nightly backup starts", "o'clock", 0, 23, "move the backup to a quieter time"}, {"compression_level", "how hard the compressor works", "levels", 1, 9, "make smaller archives but take longer"}},
		procs:    []procedure{{"restore a lost folder", []string{"Open the catalog.", "Search for the folder by name.", "Pick the date before it was lost.", "Restore it to a new place and check the files.", "Move the files back where they belong."}}, {"test the backups", []string{"Choose a few files at random.", "Restore them to a test folder.", "Compare them with the originals.", "Write down the result in the log book."}}},
		faults:   []fault{{"the backup is still running in the morning", "too many files changed at once", "start the backup earlier or lower compression_level"}, {"old backups are missing", "keep_days is too short", "raise keep_days"}, {"an archive cannot be opened", "the secret key was changed", "restore the old key from the safe"}},
		worker:   "uploader thread", workers: "uploader threads", rate: "minute"},
	{kind: "coffee machine", category: "machine", purpose: "grinds beans and brews coffee one cup at a time", item: "cup", items: "cups", place: "in cafes and office kitchens",
		parts:    []part{{"grinder", "crushes the beans into a fine powder"}, {"boiler", "heats the water"}, {"pump", "pushes the hot water through the coffee"}, {"brew group", "holds the coffee while the water passes through it"}, {"drip tray", "catches the drops that fall"}},
		settings: []setting{{"water_temp", "the temperature of the brewing water", "degrees", 85, 96, "give a stronger, more bitter taste"}, {"grind_size", "how fine the beans are ground", "steps", 1, 20, "make the coffee run through faster"}, {"cup_ml", "how much water goes into one cup", "milliliters", 25, 300, "make a larger, weaker cup"}},
		procs:    []procedure{{"descale the machine", []string{"Empty the water tank.", "Fill it with water and descaling liquid.", "Start the descaling program.", "Rinse the tank and run two tanks of clean water through."}}, {"clean the brew group", []string{"Turn the machine off.", "Open the side door.", "Pull out the brew group.", "Rinse it under warm water and let it dry."}}},
		faults:   []fault{{"the coffee is watery", "grind_size is too coarse", "choose a finer grind"}, {"water leaks under the machine", "the drip tray is full", "empty the drip tray"}, {"the coffee is too bitter", "water_temp is too high", "lower water_temp"}},
		worker:   "machine", workers: "machines", rate: "hour"},
	{pipeline: true, kind: "library catalog", category: "software service", purpose: "keeps track of every book, who borrowed it and when it is due", item: "loan", items: "loans", place: "in public and school libraries",
		parts:    []part{{"book register", "stores the title, author and shelf of every book"}, {"member list", "holds the name and card number of every reader"}, {"loan desk", "records each book that goes out and comes back"}, {"reminder service", "sends a note when a book is late"}, {"search page", "lets readers find books by title or author"}},
		settings: []setting{{"loan_days", "how long a book may be kept", "days", 7, 42, "give readers more time"}, {"max_loans", "how many books one reader may borrow", "books", 1, 30, "let readers take more home"}, {"reminder_days", "how many days after the due date a reminder is sent", "days", 1, 14, "give late readers more time before the note"}},
		procs:    []procedure{{"add a new book", []string{"Scan the code on the back of the book.", "Check the title and author.", "Choose a shelf.", "Print a label and stick it on the spine."}}, {"renew a loan", []string{"Find the reader by card number.", "Select the book.", "Choose renew.", "Tell the reader the new due date."}}},
		faults:   []fault{{"a book shows as borrowed but is on the shelf", "it was returned without being scanned", "scan it at the loan desk"}, {"readers get no reminders", "the reminder service is stopped", "start the reminder service again"}, {"searches find nothing", "the search index is out of date", "rebuild the search index"}},
		worker:   "desk", workers: "desks", rate: "hour"},
	{kind: "ventilation unit", category: "building system", purpose: "brings fresh air into a building and takes stale air out", item: "cubic meter of air", items: "cubic meters of air", place: "in schools, offices and apartments",
		parts:    []part{{"supply fan", "blows fresh air into the rooms"}, {"exhaust fan", "pulls used air out"}, {"heat exchanger", "passes warmth from the outgoing air to the incoming air"}, {"filter", "catches dust and pollen"}, {"air sensor", "measures how stale the air is"}},
		settings: []setting{{"fan_speed", "how fast both fans turn", "percent", 10, 100, "change the air faster but make more noise"}, {"co2_limit", "the level of stale air that starts boost mode", "parts per million", 600, 1500, "run the fans less often"}, {"filter_days", "how many days until a filter change is due", "days", 30, 365, "remind you less often"}},
		procs:    []procedure{{"change the filter", []string{"Switch the unit off.", "Open the filter hatch.", "Pull out the old filter.", "Slide in a new one with the arrow pointing to the fan.", "Reset the filter timer."}}, {"balance the air flow", []string{"Measure the flow at each vent.", "Open the vents that give too little.", "Close a little the vents that give too much.", "Measure again until the flows match."}}},
		faults:   []fault{{"the rooms feel stuffy", "the filter is clogged", "change the filter"}, {"the unit is very loud", "fan_speed is at its highest", "lower fan_speed"}, {"cold air comes in during winter", "the heat exchanger is blocked", "clean the heat exchanger"}},
		worker:   "unit", workers: "units", rate: "hour"},
	{kind: "telescope mount", category: "machine", purpose: "turns a telescope to follow the stars as the Earth rotates", item: "image", items: "images", place: "in observatories and back gardens",
		parts:    []part{{"base", "holds the telescope level"}, {"motor drive", "turns the telescope slowly at the speed of the sky"}, {"hand controller", "lets you choose a star to point at"}, {"star database", "stores the positions of thousands of stars"}, {"guide camera", "watches one star and corrects small errors"}},
		settings: []setting{{"slew_speed", "how fast the mount turns to a new target", "degrees per second", 1, 8, "reach targets sooner but shake the telescope more"}, {"exposure_seconds", "how long each picture is exposed", "seconds", 1, 600, "collect more light from faint objects"}, {"guide_rate", "how strongly the guide camera corrects", "percent", 10, 100, "correct errors faster but can overshoot"}},
		procs:    []procedure{{"align the mount", []string{"Level the base.", "Point the mount north.", "Choose two bright stars on the hand controller.", "Center each one when the mount stops.", "Save the alignment."}}, {"take a long picture", []string{"Point at the target.", "Start the guide camera on a nearby star.", "Set the exposure time.", "Start the exposure and do not touch the telescope."}}},
		faults:   []fault{{"the stars look like short lines", "the mount is not tracking", "check the motor drive and the alignment"}, {"the mount points to the wrong star", "the date or time is wrong", "set the date and time again"}, {"pictures are blurry", "the guide rate is too high", "lower guide_rate"}},
		worker:   "camera", workers: "cameras", rate: "night"},
	{kind: "traffic light controller", category: "control system", purpose: "switches the lights at a crossing so that cars and people take turns safely", item: "vehicle", items: "vehicles", place: "at busy street crossings",
		parts:    []part{{"signal head", "shows red, yellow and green"}, {"loop detector", "senses cars waiting in each lane"}, {"push button", "lets people ask to cross"}, {"phase timer", "decides how long each light stays on"}, {"fault monitor", "switches to flashing yellow if two greens would show at once"}},
		settings: []setting{{"green_seconds", "the longest green time for one direction", "seconds", 10, 120, "move more cars at once but make others wait longer"}, {"yellow_seconds", "how long the yellow light shows", "seconds", 3, 6, "give drivers more time to stop"}, {"walk_seconds", "how long the walk signal shows", "seconds", 5, 40, "give people more time to cross"}},
		procs:    []procedure{{"change the timing plan", []string{"Count the cars in each direction at the busy hour.", "Work out the green time each direction needs.", "Enter the new times in the phase timer.", "Watch the crossing for a day and adjust."}}, {"replace a signal bulb", []string{"Set the crossing to flashing mode.", "Open the signal head.", "Change the bulb.", "Close the head and return to normal mode."}}},
		faults:   []fault{{"cars wait at an empty crossing", "a loop detector is broken", "test and repair the loop detector"}, {"the lights flash yellow", "the fault monitor found a conflict", "check the wiring of the signal heads"}, {"people cannot finish crossing", "walk_seconds is too short", "raise walk_seconds"}},
		worker:   "lane", workers: "lanes", rate: "minute"},
}

func init() { systems = append(systems, moreSystems...) }
