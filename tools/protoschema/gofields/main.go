// Command gofields prints, for every struct reachable from the built-in
// kinds of Kubernetes v1.37.2 (client-go's scheme, apiextensions and
// apiregistration), each field's protobuf number, JSON name, whether Go
// holds it behind a pointer, whether its JSON tag says omitempty, and its
// protobuf label and type. tools/protoschema/generate.py merges this with
// the k8s-pb bindings: the pointer and omitempty facts decide which zero
// values a protobuf body really carries, and fields newer than k8s-pb's
// Kubernetes release come from here.
package main

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

var modules = map[string]string{
	"k8s.io/api/":                     "api.",
	"k8s.io/apimachinery/":            "apimachinery.",
	"k8s.io/apiextensions-apiserver/": "apiextensions_apiserver.",
	"k8s.io/kube-aggregator/":         "kube_aggregator.",
}

func messageName(t reflect.Type) string {
	for prefix, module := range modules {
		if strings.HasPrefix(t.PkgPath(), prefix) {
			return module + strings.ReplaceAll(strings.TrimPrefix(t.PkgPath(), prefix), "/", ".") + "." + t.Name()
		}
	}
	return ""
}

func scalar(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int32:
		return "int32"
	case reflect.Int64, reflect.Int:
		return "int64"
	case reflect.Bool:
		return "bool"
	case reflect.Float64:
		return "double"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
	}
	return ""
}

// protoType is the element type in the vocabulary of k8s.schema.
func protoType(t reflect.Type, queue *[]reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s := scalar(t); s != "" {
		return s
	}
	if t.Kind() == reflect.Struct || (t.Kind() == reflect.Slice && t.Name() != "") {
		*queue = append(*queue, t)
		return messageName(t)
	}
	return "?" + t.String()
}

func main() {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{scheme.AddToScheme, apiextensionsv1.AddToScheme, apiregistrationv1.AddToScheme} {
		if err := add(s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var queue []reflect.Type
	for _, t := range s.AllKnownTypes() {
		queue = append(queue, t)
	}
	queue = append(queue, reflect.TypeOf(metav1.WatchEvent{}), reflect.TypeOf(metav1.Status{}), reflect.TypeOf(metav1.DeleteOptions{}))
	seen := map[reflect.Type]bool{}
	var lines []string
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		if seen[t] || messageName(t) == "" {
			continue
		}
		seen[t] = true
		if t.Kind() != reflect.Struct {
			continue
		}
		var fields []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("protobuf")
			if tag == "" {
				continue
			}
			parts := strings.Split(tag, ",")
			if len(parts) < 2 {
				continue
			}
			number, err := strconv.Atoi(parts[1])
			if err != nil {
				continue
			}
			jsonTag := f.Tag.Get("json")
			jsonName, opts, _ := strings.Cut(jsonTag, ",")
			if jsonName == "" {
				jsonName = f.Name
			}
			omit := strings.Contains(opts, "omitempty")
			ptr := f.Type.Kind() == reflect.Pointer
			label := "one"
			var ty string
			ft := f.Type
			switch {
			case strings.Contains(opts, "inline") || (f.Anonymous && jsonTag == ""):
				label, ty = "inline", protoType(ft, &queue)
			case ft.Kind() == reflect.Map:
				label, ty = "map", protoType(ft.Elem(), &queue)
			case ft.Kind() == reflect.Slice && ft.Name() == "" && ft.Elem().Kind() != reflect.Uint8:
				label, ty = "many", protoType(ft.Elem(), &queue)
			default:
				ty = protoType(ft, &queue)
			}
			fields = append(fields, fmt.Sprintf("P %d %s %s %s %t %t", number, label, ty, jsonName, ptr, omit))
		}
		sort.Slice(fields, func(i, j int) bool {
			a, _ := strconv.Atoi(strings.Fields(fields[i])[1])
			b, _ := strconv.Atoi(strings.Fields(fields[j])[1])
			return a < b
		})
		lines = append(lines, strings.Join(append([]string{"T " + messageName(t)}, fields...), "\n"))
	}
	sort.Strings(lines)
	fmt.Println("# k8s.io/api, apimachinery, apiextensions-apiserver, kube-aggregator v0.37.2: P number label type json pointer omitempty")
	fmt.Println(strings.Join(lines, "\n"))
}
