package kind

import (
	"fmt"
	"strings"
	"text/template"
)

// RenderPrompt renders the prompt template over t. A key t does not have
// is an error, never an empty string in the prompt.
func (k *Kind) RenderPrompt(t Task) (string, error) {
	s, err := render("prompt", k.Prompt, t)
	if err != nil {
		return "", fmt.Errorf("kind %s (%s): prompt: %w", k.Name, k.File, err)
	}
	return s, nil
}

// RenderArgs renders each argument template over v.
func (k *Kind) RenderArgs(v ArgVars) ([]string, error) {
	out := make([]string, len(k.Args))
	for i, a := range k.Args {
		s, err := render("args", a, v)
		if err != nil {
			return nil, fmt.Errorf("kind %s (%s): args[%d]: %w", k.Name, k.File, i, err)
		}
		out[i] = s
	}
	return out, nil
}

// render parses and executes one template; missingkey=error makes an
// unknown key fail (a struct's unknown field always does).
func render(name, src string, data any) (string, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}
