// Command potato is the toolkit's front command: "potato validate ...",
// "potato training VERB ..." and "potato serve ..." run the matching
// potato-* binary, found beside this executable first and then on PATH,
// with arguments, standard input and output, and the exit status passed
// through. Any other verb ("potato start config.yaml") goes the same way
// to Potato's own potato, the next on PATH that is not this command
// (potato.go). See potato(1).
package main

import "os"

// route is one verb of the front command.
type route struct {
	words  []string // "training", "run"
	binary string   // "potato-dispatch"
	prefix []string // arguments put before the user's: "run"
	help   string
}

var routes = []route{
	{[]string{"validate"}, "potato-validate", nil, "check a config's model_training block"},
	{[]string{"training", "check"}, "potato-check", nil, "can a run start on a backend now?"},
	{[]string{"training", "register"}, "potato-register", nil, "issue an agent backend's token"},
	{[]string{"training", "agent"}, "potato-agent", nil, "run the agent on a training machine"},
	{[]string{"training", "run"}, "potato-dispatch", []string{"run"}, "start a run and wait for its end"},
	{[]string{"training", "curve"}, "potato-dispatch", []string{"curve"}, "fit shares of the train split and report the learning curve"},
	{[]string{"training", "cancel"}, "potato-dispatch", []string{"cancel"}, "cancel a run"},
	{[]string{"training", "status"}, "potato-dispatch", []string{"status"}, "show runs and their states"},
	{[]string{"training", "wait"}, "potato-dispatch", []string{"wait"}, "wait for runs to end; exit with their status"},
	{[]string{"training", "latest"}, "potato-dispatch", []string{"latest"}, "print the newest successful run and its model"},
	{[]string{"training", "auto"}, "potato-dispatch", []string{"auto"}, "start a run when auto_retrain calls for one (cron)"},
	{[]string{"training", "writeback"}, "potato-dispatch", []string{"writeback"}, "apply a finished run to Potato's store again"},
	{[]string{"training", "retract"}, "potato-dispatch", []string{"retract"}, "delete a finished run's prelabels from Potato's store"},
	{[]string{"training", "publish"}, "potato-dispatch", []string{"publish"}, "publish a kept run's prelabels by hand, past the promotion gate"},
	{[]string{"training", "push"}, "potato-dispatch", []string{"push"}, "send a run's model and a model card to the Hugging Face Hub"},
	{[]string{"training", "report"}, "potato-dispatch", []string{"report"}, "how annotators took the published prelabels"},
	{[]string{"training", "explain"}, "potato-dispatch", []string{"explain"}, "where an item's prelabel came from"},
	{[]string{"serve"}, "potato-server", nil, "run the Training page and the agents' server"},
}

const name = "potato"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
